"""Model backends behind two small protocols (see `base`): transformers in-process,
an OpenAI-compatible HTTP client and vLLM in-process. Use `factory.make_perceiver` /
`factory.make_reasoner` to build one from configuration."""
