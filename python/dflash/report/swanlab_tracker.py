"""SwanLab: local (files under swanlab_logdir, `swanlab watch` shows them), offline or online; the run id is kept
so a resumed training run continues it."""
from __future__ import annotations


class SwanLabTracker:
    name = "swanlab"

    def __init__(self, settings, entry: dict):
        self.settings = settings
        self.entry = entry
        self.run = None

    def open(self) -> None:
        import swanlab

        s = self.settings
        folder = s.folder(s.swanlab_logdir, "swanlog")
        folder.mkdir(parents=True, exist_ok=True)
        run_id = self.entry.get("run_id")
        self.run = swanlab.init(
            project=s.project, name=s.name, log_dir=str(folder), mode=s.swanlab_mode, config=s.train_config,
            id=run_id, resume="allow" if run_id else None, reinit=True,
            settings=swanlab.Settings(terminal={"proxy_type": "none"}, probe={"monitor": False}))
        self.entry["run_id"] = self.run.id

    def log_config(self, config: dict) -> None:
        pass  # given to init

    def log_scalars(self, step: int, scalars: dict) -> None:
        self.run.log(scalars, step=step)

    def log_images(self, step: int, pngs: dict) -> None:
        import swanlab

        self.run.log({tag: swanlab.Image(str(path)) for tag, path in pngs.items()}, step=step)

    def close(self, how: str) -> None:
        self.run.finish(state="success" if how in ("done", "interrupted") else "crashed")
