// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/status.hpp
/// What Slurm's tools print, parsed (pure, unit-tested without a cluster):
/// job ids, squeue lines, how a job ended, step ids, the controller's address.

#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/launcher.hpp>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <sys/wait.h>
#include <vector>

namespace fiber::detail::slurm_impl {

/// Parse `sbatch --parsable` output: "1234" or "1234;cluster".
inline std::optional<std::string> parse_job_id(std::string_view out) {
  auto line = trim(out.substr(0, out.find('\n')));
  line = line.substr(0, line.find(';'));
  if (line.empty() || !std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return line;
}

/// One line of our squeue format.
struct queue_entry {
  std::string id, state, nodes, reason;
  int status = 0; ///< wait status (exit_code field): code << 8 | signal
};

/// Parse `squeue -h -O JobArrayID:0|,State:0|,exit_code:0|,NodeList:0|,Reason:0`.
inline std::map<std::string, queue_entry> parse_queue(std::string_view out) {
  std::map<std::string, queue_entry> m;
  while (!out.empty()) {
    auto nl = out.find('\n');
    std::string_view line = out.substr(0, nl);
    out = nl == std::string_view::npos ? std::string_view{} : out.substr(nl + 1);
    std::vector<std::string> f;
    for (int i = 0; i < 4; ++i) {
      auto bar = line.find('|');
      if (bar == std::string_view::npos) break;
      f.push_back(trim(line.substr(0, bar)));
      line = line.substr(bar + 1);
    }
    if (f.size() != 4) continue;
    queue_entry e{f[0], f[1], f[3], trim(line), std::atoi(f[2].c_str())};
    m[e.id] = std::move(e);
  }
  return m;
}

/// Whether a job in `state` has ended for good. Unknown states count as live
/// (a job stuck in one is the runtime's start/heartbeat timeouts' business).
inline bool is_terminal(std::string_view state) {
  static constexpr std::string_view ended[] = {"BOOT_FAIL", "CANCELLED", "COMPLETED",     "DEADLINE",
                                               "FAILED",    "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                                               "TIMEOUT",   "REVOKED",   "SPECIAL_EXIT"};
  return std::find(std::begin(ended), std::end(ended), state) != std::end(ended);
}

/// Map a terminal squeue entry to a job_exit; `asked` = the signal fiber
/// asked for with cancel() (0: none).
inline backend::job_exit to_exit(const queue_entry& e, int asked) {
  using kind = backend::job_exit::kind;
  backend::job_exit x;
  int sig = e.status & 0x7f, code = (e.status >> 8) & 0xff;
  auto where = e.nodes.empty() || e.nodes == "(null)" ? std::string() : " on " + e.nodes;
  auto why = e.reason.empty() || e.reason == "None" ? std::string() : " (" + e.reason + ")";
  if (e.state == "COMPLETED") {
    x = {kind::exited, code, e.state};
  } else if (e.state == "CANCELLED") {
    x = {kind::signalled,
         asked ? asked
         : sig ? sig
               : 15,
         asked ? std::string("CANCELLED") : "CANCELLED (not by fiber)" + why};
  } else if (e.state == "FAILED") {
    if (asked && sig) x = {kind::signalled, asked, "FAILED" + why};
    else if (sig) x = {kind::signalled, sig, "FAILED" + why + where};
    else if (code) x = {kind::exited, code, "FAILED" + why};
    else x = {kind::lost, 0, "FAILED" + why + where};
  } else {
    // TIMEOUT, NODE_FAIL, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY, PREEMPTED, ...
    x = {kind::lost, 0, e.state + why + where};
  }
  return x;
}

/// Map srun's exit status (it reports 128+n when the task died of signal n).
inline backend::job_exit srun_exit(int status, int asked) {
  using kind = backend::job_exit::kind;
  if (status < 0) return {kind::lost, 0, "srun's exit status was reaped elsewhere"};
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    if (asked) return {kind::signalled, asked, "srun"};
    return {kind::lost, 0, "srun killed by signal " + std::to_string(s)};
  }
  int code = WEXITSTATUS(status);
  if (asked) return {kind::signalled, asked, "step cancelled"};
  if (code > 128 && code <= 128 + 64) return {kind::signalled, code - 128, "step"};
  return {kind::exited, code, "step"};
}

/// "SlurmctldHost[0] = vm(127.0.0.1)" -> "127.0.0.1"; "SlurmctldAddr = x".
inline std::vector<std::string> controller_hosts(std::string_view config) {
  std::vector<std::string> out;
  while (!config.empty()) {
    auto nl = config.find('\n');
    auto line = config.substr(0, nl);
    config = nl == std::string_view::npos ? std::string_view{} : config.substr(nl + 1);
    if (!line.starts_with("SlurmctldHost") && !line.starts_with("SlurmctldAddr") && !line.starts_with("ControlAddr"))
      continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    auto v = trim(line.substr(eq + 1));
    if (auto lp = v.find('('); lp != std::string::npos && v.back() == ')') v = v.substr(lp + 1, v.size() - lp - 2);
    if (!v.empty() && v != "(null)") out.push_back(v);
  }
  return out;
}

/// srun pid -> "jobid.stepid" from `scontrol show step` ("SrunHost:Pid=vm:6300").
inline std::map<pid_t, std::string> parse_steps(std::string_view out) {
  std::map<pid_t, std::string> m;
  std::string step;
  for (std::size_t pos = 0; pos < out.size();) {
    auto end = out.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = out.size();
    auto tok = out.substr(pos, end - pos);
    pos = end + 1;
    if (tok.starts_with("StepId=")) step = std::string(tok.substr(7));
    else if (tok.starts_with("SrunHost:Pid=") && !step.empty()) {
      auto colon = tok.rfind(':');
      pid_t pid = pid_t(std::atol(std::string(tok.substr(colon + 1)).c_str()));
      if (pid > 0) m[pid] = step;
    }
  }
  return m;
}

} // namespace fiber::detail::slurm_impl
