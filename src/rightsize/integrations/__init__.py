"""rightsize inside other tools' searches.

``optuna``: Packed Hyperband as an ask-and-tell driver of an ``optuna.Study``
(needs the ``optuna`` extra: ``pip install 'rightsize[optuna]'``). Nothing
here is imported by the rest of rightsize except on request.
"""
