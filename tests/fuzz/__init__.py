"""Parts of the ``.wrp`` fuzzer (tests/fuzz_wrp.py is the entry point)."""
