"""Where a release's state lives under one home directory (default: the current one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Home:
    root: Path
    ledger_path: Path | None = None

    @classmethod
    def at(cls, root: str | Path | None = None, ledger: str | Path | None = None) -> "Home":
        return cls(Path(root or ".").resolve(), Path(ledger).resolve() if ledger else None)

    @property
    def releases(self) -> Path:
        """Public files: ``releases/<release-id>/``."""
        return self.root / "releases"

    @property
    def reports(self) -> Path:
        """Internal reports: ``release_reports/<release-id>/``."""
        return self.root / "release_reports"

    @property
    def private(self) -> Path:
        """Anything holding raw rows (quarantine files, demo input)."""
        return self.root / "private"

    def partition_dataset(self, release_id: str) -> Path:
        """The release's encoded trips, one Parquet file per partition (removed once published)."""
        return self.private / release_id / "partitions"

    @property
    def ledger(self) -> Path:
        """The privacy ledger (``--ledger`` overrides ``<home>/ledger.sqlite``)."""
        return self.ledger_path or self.root / "ledger.sqlite"

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.mlflow_db}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def prefect_home(self) -> Path:
        return self.root / ".prefect"

    def mlflow_ui_command(self) -> str:
        return (f"mlflow ui --backend-store-uri {self.mlflow_uri} "
                f"--default-artifact-root {self.mlflow_artifacts.as_uri()}")
