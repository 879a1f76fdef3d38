"""Weights & Biases: offline (files under wandb_dir/wandb, uploaded later by `wandb sync`) or online; the run id is
kept so a resumed training run continues it."""
from __future__ import annotations


class WandbTracker:
    name = "wandb"

    def __init__(self, settings, entry: dict):
        self.settings = settings
        self.entry = entry
        self.run = None

    def open(self) -> None:
        import wandb

        s = self.settings
        folder = s.folder(s.wandb_dir, "")
        folder.mkdir(parents=True, exist_ok=True)
        run_id = self.entry.get("run_id")
        self.run = wandb.init(
            project=s.project, name=s.name, dir=str(folder), mode=s.wandb_mode, config=s.train_config,
            id=run_id, resume="allow" if run_id else None, reinit="create_new",
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, save_code=False,
                                    disable_git=True))
        self.entry["run_id"] = self.run.id

    def log_config(self, config: dict) -> None:
        pass  # given to init (again on resume: the same values)

    def log_scalars(self, step: int, scalars: dict) -> None:
        self.run.log(scalars, step=step)

    def log_images(self, step: int, pngs: dict) -> None:
        import wandb

        # W&B's steps only go forward: a checkpoint noticed after later lines were sent goes at the current step.
        step = max(step, self.entry.get("last_step", 0))
        self.run.log({tag: wandb.Image(str(path)) for tag, path in pngs.items()}, step=step)

    def close(self, how: str) -> None:
        self.run.finish(exit_code=0 if how in ("done", "interrupted") else 1)
