"""Forwards a run's metrics to the trackers named in its settings. Each tracker call is guarded: the first error
is said once (stderr and RUN_DIR/report/report.log) and that tracker is left out from then on; the others go on."""
from __future__ import annotations

import importlib
import sys

from .metrics import is_step_line, step_scalars
from .state import ReportState

_CLASSES = {
    "tensorboard": ("tensorboard_tracker", "TensorBoardTracker"),
    "wandb": ("wandb_tracker", "WandbTracker"),
    "mlflow": ("mlflow_tracker", "MlflowTracker"),
    "swanlab": ("swanlab_tracker", "SwanLabTracker"),
}


class Reporter:
    def __init__(self, settings, terminal=None):
        self.settings = settings
        self.terminal = terminal or sys.stderr
        self.state = ReportState(settings.report_dir / "state.json")
        self.live = []
        for name in settings.trackers:
            module, cls = _CLASSES[name]
            tracker_class = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
            self.live.append(tracker_class(settings, self.state.of(name)))

    def say(self, line: str) -> None:
        print(line, file=self.terminal, flush=True)
        try:
            self.settings.report_dir.mkdir(parents=True, exist_ok=True)
            with open(self.settings.report_dir / "report.log", "a") as f:
                f.write(line + "\n")
        except OSError:
            pass  # the run folder itself unwritable: stderr has said it

    def _each(self, what: str, call) -> None:
        for tracker in list(self.live):
            try:
                call(tracker)
            except Exception as e:  # noqa: BLE001 -- any tracker error: that tracker stops, training does not
                self.live.remove(tracker)
                hint = " (pip install 'dflash[tracking]')" if isinstance(e, ImportError) else ""
                self.say(f"report: {tracker.name} failed while {what} ({type(e).__name__}: {e}){hint}; "
                         f"training goes on without it")

    def start(self) -> None:
        self._each("starting", lambda t: t.open())
        config = self.settings.train_config

        def log_config(t):
            if not t.entry.get("config_logged"):
                t.log_config(config)
                t.entry["config_logged"] = True
        self._each("logging the run's settings", log_config)
        self.state.save()

    def forward(self, rows: list[dict]) -> int:
        """Sends each step line to the trackers that have not had that step yet; returns the last step seen."""
        last = 0
        steps = [(r["step"], step_scalars(r)) for r in rows if is_step_line(r)]
        if not steps:
            return last

        def send(t):
            for step, scalars in steps:
                if step > t.entry.get("last_step", 0) and scalars:
                    t.log_scalars(step, scalars)
                    t.entry["last_step"] = step
        self._each("logging metrics", send)
        self.state.save()
        return steps[-1][0]

    def extra(self, step: int, scalars: dict, what: str) -> None:
        """Scalars that are not a training step's (eval results): sent to every tracker at `step`."""
        if scalars:
            self._each(what, lambda t: t.log_scalars(step, scalars))

    @property
    def plotted_step(self) -> int:
        """The last checkpoint step whose plots were sent (kept in state.json, so a resume does not send them
        again)."""
        return self.state.data.get("plots", {}).get("step", 0)

    def images(self, step: int, pngs: dict) -> None:
        if pngs:
            self._each("logging plots", lambda t: t.log_images(step, pngs))
        self.state.data["plots"] = {"step": step}
        self.state.save()

    def close(self, how: str) -> None:
        self._each("closing", lambda t: t.close(how))
        self.state.save()
