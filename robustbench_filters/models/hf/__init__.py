"""Hugging Face causal language models in robfilt: loading, lm-eval perplexities and BSA/GRC conversions.

Any ``AutoModelForCausalLM`` folder written by ``save_pretrained`` (``--model hf:DIR``), or a hub id already in the
local Hugging Face cache, runs through the same LM measurement as robfilt's own GPT: embedding-space FGSM/PGD
through ``inputs_embeds``, word-swap contamination, per-example rows, resume, torchrun, Lipschitz lower bounds,
the gate and reports. The pieces:

- :mod:`.load`: folders and the local hub cache (never the network), the causal-LM and tokenizer checks, precision;
- :mod:`.adapter`: :class:`~.adapter.HFCausalLM`, the small object the measurement talks to (token embeddings,
  logits from embeddings, the tokenizer, the window);
- :mod:`.rolling`: lm-eval's rolling log-likelihood windows and its word/byte perplexity and bits per byte;
  :mod:`.perplexity` scores documents with any LM (:func:`.perplexity.score_documents`, the one metric code of
  ``robfilt attack`` and ``robfilt train``; :func:`.perplexity.evaluate_perplexity`);
- :mod:`.trust`: a folder's JSON configs read by robfilt, and a folder that needs its own code refused;
- :mod:`.convert` (with :mod:`.gpt2`, :mod:`.llama`): this project's BSA and GRC for GPT-2, GRC for Llama-style
  blocks, recorded in ``config.json`` and rebuilt on load;
- :mod:`robustbench_filters.train.hf`: ``robfilt train --model hf:DIR --variant ...``: convert, fine-tune, save a loadable folder.

Importing this package does not import ``transformers`` (the ``hf`` extra); every entry point that needs it calls
:func:`require_transformers`, which names the install command in one line when it is missing.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from ...core.errors import RobfiltError
from ...core.names import HF_INSTALL as INSTALL


def require_transformers() -> ModuleType:
    """``transformers``, or the one-line error that says how to install the ``hf`` extra."""
    try:
        import transformers
    except ImportError:
        raise RobfiltError(f"hf: models need the Hugging Face extra (transformers); run {INSTALL}.") from None
    return transformers


def is_hf_model(obj: Any) -> bool:
    """A ``transformers`` model object (checked without importing ``transformers`` when nobody has)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(obj, transformers.PreTrainedModel)


__all__ = ["INSTALL", "is_hf_model", "require_transformers"]
