"""FairRAG study: ``fairrag study`` reproduces *Towards FairRAG* on the TREC 2022 Fair Ranking
gender data and ``fairrag sweep`` draws the rankers' fairness–utility frontier (the ``fairrag``
command is :func:`fairrag_study.cli.main`). Needs ``pip install 'fairrag[study]'``; the README's
"The study" section describes the runs and their outputs."""
