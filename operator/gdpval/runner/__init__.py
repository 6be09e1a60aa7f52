"""Running samples: preparing a run, executing one attempt, and the local concurrent runner."""
