"""Run tools shared by the trainers and evaluate: run configs, host counters, CLI plumbing."""
