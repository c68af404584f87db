"""The study's phases, in the order :func:`fairrag_study.study.run_study` runs them (docs/SPEC.md,
"The study"): each module has one entry point, taking the earlier phases' results and its
own settings (a record of :mod:`fairrag_study.settings`, built by
:meth:`~fairrag_study.config.StudyConfig.phase_settings`), never the whole configuration, and
hands the next what it made.

1. data (:func:`~fairrag_study.phases.data.load_corpus`): the documents, the corpus, the trials;
2. index (:func:`~fairrag_study.phases.index.embed_corpus`): the corpus embedded and verified;
3. trials (:func:`~fairrag_study.phases.trials.run_trials`): one record per ranker and trial
   (generation runs inside, with the chat model
   :func:`~fairrag_study.phases.generation.open_generation` opened first);
4. many rankings (:func:`~fairrag_study.phases.many.measure_many`): the metrics over many
   rankings on the trials' pools (:func:`~fairrag_study.phases.many.trial_pools`), and the
   amortized ranker's frontier;
4b. position curve, opt-in (:func:`~fairrag_study.position_curve.run_position_curve`): the
   generator's P(attributed | position) on the trials' pools, and an exposure model fitted
   from it;
5. report (:func:`~fairrag_study.phases.report.write_report`): the report, tables and figures.
"""

from .data import StudyCorpus, load_corpus
from .generation import Generation, open_generation
from .index import StudyIndex, embed_corpus
from .many import measure_many, trial_pools
from .report import write_report
from .trials import run_trials

__all__ = [
    "Generation",
    "StudyCorpus",
    "StudyIndex",
    "embed_corpus",
    "load_corpus",
    "measure_many",
    "open_generation",
    "run_trials",
    "trial_pools",
    "write_report",
]
