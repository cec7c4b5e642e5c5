"""Training: recipes (:mod:`.recipe`), robfilt's deterministic, resumable loop for its own variants (:mod:`.loop`)
and the conversion and fine-tuning of Hugging Face causal LMs (:mod:`.hf`).
"""
