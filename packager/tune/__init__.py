"""Auto-tuning of schedule templates, measured on the board.

tasks (what to tune) -> space (the template's knobs as an index) -> measure (candidates
built into one timing driver per batch, run locally or over SSH) -> features + model
(XGBoost ranking on loop-IR features) -> search (annealing over the model) -> log
(JSON Lines records) -> apply (build time: the chosen record of each task, log.choose).
"""
