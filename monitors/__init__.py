"""The step monitor: hashed telemetry, one-class detectors (ESN/CUSUM, Mahalanobis), calibrated fusion, model files."""

from monitors.monitor import DEFAULT_CONFIG, PRESETS, EpisodeScore, MonitorStream, StepMonitor
from monitors.telemetry import Telemetry

__all__ = ["DEFAULT_CONFIG", "PRESETS", "EpisodeScore", "MonitorStream", "StepMonitor", "Telemetry"]
