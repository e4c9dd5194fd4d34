// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/commands.hpp
/// The Slurm commands fiber runs, as argv vectors and scripts (pure, unit-
/// tested without a cluster): sbatch of one job or one array, srun of a step,
/// scancel, the squeue poll, the reaper's program.

#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/slurm/options.hpp>
#include <fiber/backend/launcher.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail::slurm_impl {

/// One sbatch submission: the script fed on stdin, the variables added to
/// sbatch's environment, and the output paths.
struct batch_plan {
  std::string name;                                      ///< --job-name
  std::string script;                                    ///< #!/bin/sh ... exec argv
  std::vector<std::pair<std::string, std::string>> env;  ///< added to sbatch's environment
  std::string output = "/dev/null", error = "/dev/null"; ///< --output / --error
  std::size_t array_size = 0;                            ///< 0: plain job; n: --array=0-(n-1)
};

/// The longest common prefix of the specs' names without trailing
/// separators ("pool-1-w0","pool-1-w1" -> "pool-1"); "fiber" if empty.
inline std::string common_name(const std::vector<const backend::job_spec*>& specs) {
  std::string p = specs.front()->name;
  for (auto* s : specs) {
    std::size_t i = 0;
    while (i < p.size() && i < s->name.size() && p[i] == s->name[i]) ++i;
    p.resize(i);
  }
  if (specs.size() > 1) {
    while (!p.empty() && std::string_view("-_.:/ ").find(p.back()) == std::string_view::npos) p.pop_back();
    while (!p.empty() && std::string_view("-_.:/ ").find(p.back()) != std::string_view::npos) p.pop_back();
    if (p.empty()) p = specs.front()->name;
  }
  return p.empty() ? "fiber" : p;
}

inline std::string exec_line(const std::vector<std::string>& argv) {
  std::string s = "exec";
  for (auto& a : argv) s += " " + sh_quote(a);
  return s + "\n";
}

/// Plan the submission of `specs` (all with the same argv): one plain job
/// when there is one spec, else one array. Environment values never enter
/// the script (see the file comment); paths and argv do (they are not secret).
inline batch_plan plan_batch(const std::vector<const backend::job_spec*>& specs) {
  batch_plan p;
  p.name = common_name(specs);
  const auto& argv = specs.front()->argv;
  std::string sh = "#!/bin/sh\n# fiber (slurm backend): one worker";
  if (specs.size() == 1) {
    const auto& s = *specs.front();
    p.env = s.env;
    if (s.stdout_path) p.output = *s.stdout_path;
    if (s.stderr_path) p.error = *s.stderr_path;
    p.script = sh + "\n" + exec_line(argv);
    return p;
  }
  p.array_size = specs.size();

  // Variables equal in every spec are exported as they are.
  std::map<std::string, std::vector<const std::string*>> by_key; // key -> value per spec (nullptr: absent)
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (auto& [k, v] : specs[i]->env) {
      auto& vals = by_key[k];
      vals.resize(specs.size(), nullptr);
      vals[i] = &v;
    }
  std::vector<std::string> varying;
  for (auto& entry : by_key) {
    auto& vals = entry.second;
    vals.resize(specs.size(), nullptr);
    const std::string* first = vals[0];
    bool same = std::all_of(vals.begin(), vals.end(),
                            [first](const std::string* v) { return v && first && *v == *first; });
    if (same) p.env.emplace_back(entry.first, *first);
    else varying.push_back(entry.first);
  }
  auto path_of = [](const std::optional<std::string>& o) { return o.value_or("/dev/null"); };
  bool same_out = true, same_err = true;
  for (auto* s : specs) {
    same_out &= path_of(s->stdout_path) == path_of(specs.front()->stdout_path);
    same_err &= path_of(s->stderr_path) == path_of(specs.front()->stderr_path);
  }
  if (same_out) p.output = path_of(specs.front()->stdout_path);
  if (same_err) p.error = path_of(specs.front()->stderr_path);

  sh += " per array task; task i takes spec i's variables from __FIBER_SLURM_<i>_<k>\n";
  sh += "case \"${SLURM_ARRAY_TASK_ID:-}\" in\n";
  std::string unset_line = "unset";
  for (std::size_t i = 0; i < specs.size(); ++i) {
    sh += std::to_string(i) + ")";
    for (std::size_t k = 0; k < varying.size(); ++k) {
      const std::string* v = by_key[varying[k]][i];
      const std::string& key = varying[k];
      if (v) {
        std::string carrier = "__FIBER_SLURM_" + std::to_string(i) + "_" + std::to_string(k);
        p.env.emplace_back(carrier, *v);
        unset_line += " " + carrier;
        sh += " " + key + "=\"$" + carrier + "\"; export " + key + ";";
      } else {
        sh += " unset " + key + ";";
      }
    }
    if (!same_out) sh += " exec >" + sh_quote(path_of(specs[i]->stdout_path)) + ";";
    if (!same_err) sh += " exec 2>" + sh_quote(path_of(specs[i]->stderr_path)) + ";";
    sh += " ;;\n";
  }
  sh += "*) echo \"fiber: unexpected SLURM_ARRAY_TASK_ID='${SLURM_ARRAY_TASK_ID:-}'\" >&2; exit 70 ;;\nesac\n";
  if (unset_line != "unset") sh += unset_line + "\n";
  p.script = sh + exec_line(argv);
  return p;
}

/// Whether specs of one group can share an array (their differing variables
/// must be exportable by sh).
inline bool arrayable(const std::vector<const backend::job_spec*>& specs) {
  for (auto* s : specs)
    for (auto& [k, v] : s->env)
      if (!is_shell_identifier(k)) return false;
  return true;
}

inline void add_resource_args(std::vector<std::string>& a, const fiber::resources& r) {
  if (r.cpu > 0) a.push_back("--cpus-per-task=" + std::to_string(r.cpu));
  if (r.memory_mb > 0) a.push_back("--mem=" + std::to_string(r.memory_mb) + "M");
  if (r.gpu > 0) a.push_back("--gres=gpu:" + std::to_string(r.gpu));
}

/// sbatch's argv for `plan` (the script comes on stdin). User extra args go
/// after fiber's defaults (so they can override them) and before the
/// options fiber depends on (--parsable, --export=ALL, --no-requeue, --array).
inline std::vector<std::string> sbatch_argv(const slurm_options& o, const batch_plan& p, const fiber::resources& r) {
  std::vector<std::string> a{o.bin("sbatch"),      "--job-name=" + p.name, "--output=" + p.output,
                             "--error=" + p.error, "--ntasks=1",           "--nodes=1"};
  add_resource_args(a, r);
  if (o.partition) a.push_back("--partition=" + *o.partition);
  if (o.account) a.push_back("--account=" + *o.account);
  if (o.time_limit) a.push_back("--time=" + *o.time_limit);
  a.insert(a.end(), o.extra_args.begin(), o.extra_args.end());
  a.insert(a.end(), {"--parsable", "--export=ALL", "--no-requeue"});
  if (p.array_size > 0) a.push_back("--array=0-" + std::to_string(p.array_size - 1));
  return a;
}

/// srun's argv for one step of allocation `allocation` running `spec`.
inline std::vector<std::string> srun_argv(const slurm_options& o, const std::string& allocation,
                                          const backend::job_spec& spec) {
  std::vector<std::string> a{o.bin("srun"),
                             "--jobid=" + allocation,
                             "--ntasks=1",
                             "--nodes=1",
                             "--exact",
                             "--quiet",
                             "--input=none",
                             "--export=ALL",
                             "--job-name=" + (spec.name.empty() ? "fiber" : spec.name)};
  if (o.overlap) a.push_back("--overlap");
  add_resource_args(a, spec.resources);
  if (spec.stdout_path) a.push_back("--output=" + *spec.stdout_path);
  if (spec.stderr_path) a.push_back("--error=" + *spec.stderr_path);
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return a;
}

/// scancel's argv: 0 or 15 -> plain (SIGTERM, SIGKILL after KillWait); 9 ->
/// --signal=KILL --full; other n -> --signal=n --full.
inline std::vector<std::string> scancel_argv(const slurm_options& o, const std::vector<std::string>& ids, int signal) {
  std::vector<std::string> a{o.bin("scancel")};
  if (signal == 9) a.insert(a.end(), {"--signal=KILL", "--full"});
  else if (signal != 0 && signal != 15) a.insert(a.end(), {"--signal=" + std::to_string(signal), "--full"});
  a.insert(a.end(), ids.begin(), ids.end());
  return a;
}

/// squeue's argv for the poll of `ids` (parse_queue reads its output).
inline std::vector<std::string> squeue_argv(const slurm_options& o, const std::vector<std::string>& ids) {
  return {o.bin("squeue"),
          "-h",
          "-r",
          "-t",
          "all",
          "-j",
          join(ids, ","),
          "-O",
          "JobArrayID:0|,State:0|,exit_code:0|,NodeList:0|,Reason:0"};
}

/// The reaper's argv (see slurm.hpp, "Reaper"): awk reading lines from the
/// master: "<id>" a live job, "-<id>" it ended, "done" the master cleaned up;
/// at EOF without "done" one `scancel` of the jobs still live.
inline std::vector<std::string> reaper_argv(const slurm_options& o) {
  return {"awk", "-v", "scancel=" + sh_quote(o.bin("scancel")),
          "$0 == \"done\" { done = 1; exit } /^-/ { delete live[substr($0, 2)]; next } { live[$0] = 1 } "
          "END { if (done) exit 0; ids = \"\"; for (k in live) ids = ids \" \" k; "
          "if (ids != \"\") system(scancel ids \" >/dev/null 2>&1\") }"};
}

} // namespace fiber::detail::slurm_impl
