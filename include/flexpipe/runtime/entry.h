// The runtime library's one entry point, looked up by name when the CLI loads the library.
#pragma once
#include "flexpipe/runtime/run_request.h"
#include "flexpipe/runtime/runtime_facts.h"

// Trains every run of the request on this rank; prints reports; returns the process exit code
// (flexpipe/support/exit_status.h; 1 when verification failed, 3 when a peer or transfer failed).
extern "C" int flexpipe_runtime_main(const flexpipe::runtime::RunRequest* request);

// Measures the request's model operator by operator and writes the measured cost graph; returns the
// exit code (flexpipe/support/exit_status.h).
extern "C" int flexpipe_runtime_profile(const flexpipe::runtime::ProfileRequest* request);

// Checks what needs torch before any rank starts: a captured model's export against each run's
// partition, its module files and its data. Prints one error and returns its exit code, or 0.
extern "C" int flexpipe_runtime_check(const flexpipe::runtime::RunRequest* request);

// Fills `facts`: libtorch's version and CUDA, its c10d backends, the GPUs visible. Returns 0.
extern "C" int flexpipe_runtime_facts(flexpipe::runtime::RuntimeFacts* facts);
