// Anchors the tests' precompiled header (test_pch.h) in a target of its own.
int main() { return 0; }
