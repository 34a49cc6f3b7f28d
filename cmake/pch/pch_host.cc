// The translation unit that precompiles the library headers of
// cmake/pitstop_pch.cmake for its host target; it has no code of its own.
