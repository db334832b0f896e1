"""The evaluation harness: the SAFS paper's experiments as ``safs eval NAME`` (docs/evaluation.md).

* :mod:`safs.eval.experiments` -- the experiments (scenario, headline metrics, comparison with
  the paper), confidence intervals over seeds, the baselines' own-paper checks.
* :mod:`safs.eval.parallel` -- serial, local process pool or Ray execution of independent runs.
* :mod:`safs.eval.plots` -- matplotlib figures (PNG and PDF) from the results.
* :mod:`safs.eval.command` -- the ``safs eval`` subcommand.
"""
