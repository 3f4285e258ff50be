// Command capi is built with -buildmode=c-shared into libgonccl.so: the C ABI declared
// in gonccl.h. It is deliberately thin: every exported function checks its arguments,
// converts C types, calls core, and turns the result into a goncclResult_t. No panic
// crosses the C boundary. The only symbols it exports start with "gonccl".
package main

func main() {}
