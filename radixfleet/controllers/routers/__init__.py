"""The routers controller: one SGLang gateway (smg) per serving revision of each model."""
