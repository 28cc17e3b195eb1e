"""sgl_speccompact: fast structured compaction of LLM-agent histories on SGLang."""
