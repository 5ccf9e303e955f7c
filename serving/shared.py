"""What every servicer of one process shares: settings, store, auth, metrics, drain."""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.auth import Authenticator
from serving.lifecycle import HealthBoard, Lifecycle
from serving.metrics import Metrics
from serving.settings import ServerSettings
from store.protocol import Store


@dataclass(frozen=True)
class Serving:
    settings: ServerSettings
    store: Store
    auth: Authenticator
    metrics: Metrics = field(default_factory=Metrics)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    health: HealthBoard = field(default_factory=HealthBoard)
