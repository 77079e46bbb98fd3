"""POST /v1/verify: detect and decode texts for the levels the caller's role may see."""
