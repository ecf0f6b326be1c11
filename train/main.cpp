#include <iostream>
int main() { std::cout << "tapegrad\n"; }
