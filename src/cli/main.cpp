#include <cstdio>
int main() { std::puts("flexpipe"); return 0; }
