"""The rollout controller: metric-gated canaryTrafficPercent steps for InferenceServices."""
