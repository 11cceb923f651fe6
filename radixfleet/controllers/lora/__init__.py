"""The LoRA controller: which LoRA adapters each replica of a LoRA model keeps loaded."""
