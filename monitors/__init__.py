"""The step monitor: hashed telemetry, one-class detectors (ESN/CUSUM, Mahalanobis), calibrated fusion, model files."""

from monitors.features import Telemetry
from monitors.monitor import DEFAULT_CONFIG, PRESETS, EpisodeScore, MonitorStream, StepMonitor

__all__ = ["DEFAULT_CONFIG", "PRESETS", "EpisodeScore", "MonitorStream", "StepMonitor", "Telemetry"]
