// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file error.hpp
/// fiber's exception hierarchy. Every exception fiber throws derives from
/// fiber::error (itself std::runtime_error), except std::logic_error for API
/// misuse (e.g. submitting to a closed Pool) as Python's multiprocessing does.
/// All types are cheap to copy and safe to throw across threads.

#include <stdexcept>
#include <string>

namespace fiber {

/// Base of every fiber exception.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A remote target or method threw. `what()` is "<type>: <message>";
/// type_name() is the remote exception's (demangled) type.
class remote_error : public error {
public:
  /// An error whose what() is "<type_name>: <message>".
  remote_error(std::string type_name, std::string message)
      : error(type_name + ": " + message), type_name_(std::move(type_name)), message_(std::move(message)) {}
  /// Demangled type of the exception thrown in the remote process.
  const std::string& type_name() const noexcept { return type_name_; }
  /// The remote exception's what().
  const std::string& message() const noexcept { return message_; }

private:
  std::string type_name_;
  std::string message_;
};

/// The process that held a task or an object died (killed, crashed, job lost,
/// heartbeat missed) more often than allowed.
class worker_lost : public error {
public:
  using error::error;
};

/// Bytes that do not describe a value of the requested type (truncated,
/// oversized, random or hostile input).
class serialization_error : public error {
public:
  using error::error;
};

/// Reading a Connection whose peer end is closed and drained.
class eof_error : public error {
public:
  using error::error;
};

/// A timed wait (e.g. AsyncResult::get(timeout)) expired.
class timeout_error : public error {
public:
  using error::error;
};

/// A job could not be started or watched; the message names the backend and
/// carries the cluster manager's own words.
class backend_error : public error {
public:
  using error::error;
};

/// A peer was refused at connection time: wrong secret, or a worker binary
/// whose build id / registry hash differs from the master's.
class handshake_error : public error {
public:
  using error::error;
};

/// A fiber::Barrier is broken: abort() was called, a wait timed out or was
/// cancelled, or a process waiting on it ended. Thrown from every wait that
/// was in progress, and at once from later waits until reset().
class broken_barrier_error : public error {
public:
  using error::error;
};

/// A Lock, RLock or Semaphore hold of this process was taken back: the
/// object's owner lost its link to this process and learned that it was
/// dead (its job ended, its master lost it) or, for a process no master
/// knows, did not hear from it for a grace period; the hold went to the
/// next waiter. Thrown by release(), Condition::wait and notify instead of
/// releasing another's hold (fencing); the object itself is fine.
class hold_revoked_error : public error {
public:
  using error::error;
};

/// A configuration key that does not exist, or a value that does not parse
/// or lies outside the key's range (fiber::set_config, fiber.toml, the
/// environment).
class config_error : public error {
public:
  using error::error;
};

} // namespace fiber
