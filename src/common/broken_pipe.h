#pragma once
// Note [A broken pipe is an error, not a death]
// Writing to a socket or pipe whose reader is gone raises SIGPIPE, and its default action ends
// the process silently: no exception, no log line, no exit status of ours. Gloo writes its
// collectives with writev() and expects EPIPE back (tcp/pair.cc handles it), because Python,
// which PyTorch is usually run from, ignores SIGPIPE at start-up. A C++ worker must do the
// same, or a peer killed mid-round takes a survivor down with it (seen in CI: the survivor
// vanished mid-send while the test expected it to regroup). Likewise a notebook that stops
// reading a worker's output must not kill the worker.
//
// A no-op handler rather than SIG_IGN: handlers are reset by exec(), an ignored signal is
// not, so programs gradbox starts (rclone, gradbox-sync, a shell's `head`) keep the default.
namespace gradbox {

// Idempotent; leaves alone a SIGPIPE disposition that someone already chose (not the default).
void survive_broken_pipes();

}  // namespace gradbox
