"""fastslow, the app: the ``fastslow`` commands, the pipeline, prediction, reports, the offline leaderboard and
Kaggle access, built on the libraries below it (:mod:`models`, :mod:`features`, :mod:`competition`).

In a notebook, ``import fastslow`` gives the functions the commands of the same names run, their tables as pandas
DataFrames (:mod:`fastslow.api`): :func:`submit`, :func:`train`, :func:`predict`, :func:`score`,
:func:`leaderboard`.
"""

from fastslow.api import collection_scores, graph_scores, leaderboard, predict, score, submit, train

__all__ = ["submit", "train", "predict", "score", "leaderboard", "collection_scores", "graph_scores"]
