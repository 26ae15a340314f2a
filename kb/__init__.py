"""kb: a verified knowledge base of FlashAttention claims."""

__version__ = "0.1.0"
