"""Session plugins that are plain functions over session data (min-runtime, preemption delay)."""
