"""Runs dflash.report (python/dflash/report) from this checkout for `dflash train --report-to` and `dflash report`,
without loading the package's ops library: reporting needs neither it nor torch (TensorBoard's writer loads torch
itself). The plots come from plot_metrics.py beside this file.
Usage: report.py follow RUN_DIR | report.py replay RUN_DIR --settings JSON"""
import importlib
import pathlib
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent
# `dflash` as a bare namespace over python/dflash: its __init__ (which loads libdflash_ops.so) is not run.
package = types.ModuleType("dflash")
package.__path__ = [str(HERE.parent / "dflash")]
sys.modules["dflash"] = package

if __name__ == "__main__":
    main = importlib.import_module("dflash.report.__main__").main
    sys.exit(main(sys.argv[1:] + ["--plot-script", str(HERE / "plot_metrics.py")]))
