"""Speculation simulated over recorded greedy replies, for the benchmarks/ scripts and the tests that check them:
``ngram`` (draft-length policies for n-gram copies), ``suffix`` (the stored chats' copies and the engine's own "auto"),
``trees`` (candidate trees against chains). Nothing is timed but a verify sweep; what the target accepts is read off
the recorded reply."""
