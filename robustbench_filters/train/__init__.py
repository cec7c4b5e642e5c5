"""Training: the recipes, robfilt's deterministic resumable loop (:mod:`.loop`) and Hugging Face fine-tuning (:mod:`.hf`)."""
