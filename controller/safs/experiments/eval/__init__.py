"""The evaluation harness: the SAFS paper's experiments as ``safs eval NAME`` (docs/evaluation.md).

* :mod:`safs.experiments.eval.experiments` -- the experiments (scenario, headline metrics, comparison with
  the paper), confidence intervals over seeds, the baselines' own-paper checks.
* :mod:`safs.experiments.parallel` -- serial, local process pool or Ray execution of independent runs.
* :mod:`safs.experiments.eval.plots` -- matplotlib figures (PNG and PDF) from the results.
* :mod:`safs.apps.eval_command` -- the ``safs eval`` subcommand.
"""
