// Package config is gonccl's one place for settings: a typed registry of GONCCL_*
// environment variables (Param: name, default, meaning, and a parser that checks the
// value, its range included, and stores it), the loop that reads them all (Load), their
// echo at INFO (Echo), the README's table of them (Table, SpliceTable), and the loggers
// that GONCCL_DEBUG and GONCCL_DEBUG_SUBSYS configure, for core and cuda alike
// (Loggers).
//
// It is generic over the struct a registry fills, so each package keeps its own
// settings unexported and lists only its rows (core/params.go). It must not know any
// particular setting, and it reads the environment only through internal/cenv, so that
// variables a host program sets after the library loaded are seen.
package config
