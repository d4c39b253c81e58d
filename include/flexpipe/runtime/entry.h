#pragma once
// The runtime library's one entry point, looked up by name when the CLI loads the library.
#include "flexpipe/runtime/run_request.h"

// Trains every run of the request on this rank; prints reports; returns the process exit code
// (0 success, 1 verification failed, 2 bad input, 3 a peer or transfer failed).
extern "C" int flexpipe_runtime_main(const flexpipe::runtime::RunRequest* request);

// Measures the request's model operator by operator and writes the measured cost graph; returns the
// exit code (0, or 2 for bad input).
extern "C" int flexpipe_runtime_profile(const flexpipe::runtime::ProfileRequest* request);
