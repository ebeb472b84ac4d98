"""The backends: the Backend protocol (base.py) and its two implementations, llama/ (GGUF on
llama.cpp) and hf/ (transformers). open.py opens one for an EngineConfig; openmp.py gives back a
thread's OpenMP workers. The decode loop, the caches and speculation are written once above them."""
