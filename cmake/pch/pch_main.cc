// The translation unit that precompiles the library headers of
// cmake/pitstop_pch.cmake for the executables' host target (-fPIE, unlike
// the libraries'); an executable needs a main.
int main() { return 0; }
