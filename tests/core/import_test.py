"""``import fairrag_core`` stays light: numpy only, scipy when the study's statistics need it."""

from __future__ import annotations

import subprocess
import sys


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


def test_importing_the_core_imports_neither_scipy_nor_numba():
    code = (
        "import sys\n"
        "import fairrag_core\n"
        "from fairrag_core import make_ranker\n"
        "make_ranker('representative_stochastic', protected='f').sample([0.2, 0.1], ['f', 'm'])\n"
        "print(sorted(m for m in ('scipy', 'numba') if m in sys.modules))\n"
    )
    assert _python(code) == "[]"


def test_the_statistics_import_scipy_when_first_used():
    code = (
        "import sys\n"
        "from fairrag_core import stats\n"
        "before = 'scipy' in sys.modules\n"
        "print(before, round(stats.critical_t(158), 4), 'scipy.special' in sys.modules,\n"
        "      'scipy.stats' in sys.modules)\n"
    )
    # the t distribution from scipy.special (stdtrit, stdtr), not scipy.stats (0.6 s)
    assert _python(code) == "False 2.6073 True False"
