"""One module per release kind: plan the spends, sanitize from charged events, evaluate, public outputs and privacy statement."""
