// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/wire.hpp
/// The pure parts of the kubernetes backend: the worker pod and the run's
/// Secret as JSON documents, what a pod's status says about its worker (a
/// job_exit, or why it still waits), watch events and API error messages.
/// No I/O; unit-tested without an API server.

#include <fiber/backend/detail/http_types.hpp>
#include <fiber/backend/kubernetes/access.hpp>
#include <fiber/backend/kubernetes/options.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/error.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail::kube {

/// A failed API call, or an API server that cannot be reached. The message
/// starts with "kubernetes: " and carries the API server's own message;
/// status() is the HTTP status (0: no answer), reason() the Status reason
/// ("Forbidden", "AlreadyExists", "Expired", ...).
class api_error : public fiber::backend_error {
public:
  api_error(const std::string& what, long status, std::string reason = {})
      : backend_error(what), status_(status), reason_(std::move(reason)) {}
  long status() const noexcept { return status_; }
  const std::string& reason() const noexcept { return reason_; }

private:
  long status_;
  std::string reason_;
};

/// The API server's words for a failed call: a Status document's message
/// (and reason), else the body, else the HTTP status.
inline std::string status_message(long status, const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.value("kind", "") == "Status") {
    auto msg = j.value("message", "");
    auto reason = j.value("reason", "");
    if (!msg.empty())
      return msg + " (" + (reason.empty() ? "" : reason + ", ") + "HTTP " + std::to_string(status) + ")";
  }
  auto b = trim_text(body);
  if (b.size() > 300) b = b.substr(0, 300) + "...";
  return (b.empty() ? std::string() : b + " ") + "(HTTP " + std::to_string(status) + ")";
}

/// The Status reason of a failed call's body ("" if none).
inline std::string status_reason(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  return j.is_object() ? j.value("reason", "") : std::string();
}

// ---------------------------------------------------------------------------
// Documents fiber creates
// ---------------------------------------------------------------------------

/// A key of the run's Secret mounted as a file at `path` (read-only, mode
/// 0400: readable as root, or as any user of a pod that sets fsGroup).
struct file_mount {
  std::string key, path;
};

/// The pod that owns the workers (the master's own, when it runs in one).
struct owner_ref {
  std::string name, uid;
};

/// What one worker pod is made from.
struct pod_input {
  std::string name;
  std::string image, image_pull_policy, service_account;
  bool automount_token = false;
  std::vector<std::string> argv; ///< argv[0]: the command
  std::vector<std::pair<std::string, std::string>> env;
  std::string secret_name;                       ///< the run's Secret ("": none)
  std::map<std::string, std::string> secret_env; ///< env name -> key of the Secret (valueFrom.secretKeyRef)
  std::vector<file_mount> files;
  std::map<std::string, std::string> labels;
  fiber::resources resources;
  std::string gpu_resource = "nvidia.com/gpu";
  std::optional<owner_ref> owner;
  nlohmann::json image_pull_secrets;         ///< an array, or null
  nlohmann::json pod_patch, container_patch; ///< merge patches, or null
};

inline nlohmann::json owner_references(const owner_ref& o) {
  return nlohmann::json::array(
      {{{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", o.name}, {"uid", o.uid}, {"blockOwnerDeletion", false}}});
}

/// The worker pod: one container `worker` running argv with the spec's
/// environment (a Secret's key for what `secret_env` names: never its value),
/// restartPolicy Never, requests = limits from `resources` (cpu, memory_mb
/// -> Mi, gpu -> gpu_resource), labels, an ownerReference to the master's
/// pod. Then the merge patches (RFC 7386): container_patch on the container,
/// pod_patch on the pod; lists are replaced as RFC 7386 says, except `env`,
/// `volumeMounts` and `volumes`, whose entries are added to fiber's. fiber's
/// own choices that the worker's lifecycle depends on (restartPolicy, the
/// container's name, command, args and fiber's variables) stay.
inline nlohmann::json pod_manifest(const pod_input& in) {
  using nlohmann::json;
  json env = json::array();
  for (auto& [k, v] : in.env) {
    if (auto s = in.secret_env.find(k); s != in.secret_env.end() && !in.secret_name.empty())
      env.push_back({{"name", k}, {"valueFrom", {{"secretKeyRef", {{"name", in.secret_name}, {"key", s->second}}}}}});
    else env.push_back({{"name", k}, {"value", v}});
  }
  json c = {{"name", container_name}, {"image", in.image}, {"env", env}};
  if (!in.argv.empty()) c["command"] = json::array({in.argv[0]});
  c["args"] = json(std::vector<std::string>(in.argv.size() > 1 ? in.argv.begin() + 1 : in.argv.end(), in.argv.end()));
  if (!in.image_pull_policy.empty()) c["imagePullPolicy"] = in.image_pull_policy;
  json res = json::object();
  if (in.resources.cpu > 0) res["cpu"] = std::to_string(in.resources.cpu);
  if (in.resources.memory_mb > 0) res["memory"] = std::to_string(in.resources.memory_mb) + "Mi";
  if (in.resources.gpu > 0) res[in.gpu_resource] = std::to_string(in.resources.gpu);
  if (!res.empty()) c["resources"] = {{"requests", res}, {"limits", res}};
  json volumes = json::array();
  if (!in.files.empty() && !in.secret_name.empty()) {
    json items = json::array(), mounts = json::array();
    for (auto& f : in.files) {
      items.push_back({{"key", f.key}, {"path", f.key}, {"mode", 0400}});
      mounts.push_back({{"name", "fiber-run"}, {"mountPath", f.path}, {"subPath", f.key}, {"readOnly", true}});
    }
    volumes.push_back({{"name", "fiber-run"},
                       {"secret", {{"secretName", in.secret_name}, {"items", items}, {"defaultMode", 0400}}}});
    c["volumeMounts"] = mounts;
  }
  json labels = json::object();
  for (auto& [k, v] : in.labels) labels[k] = v;
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", in.name}, {"labels", labels}}},
              {"spec",
               {{"restartPolicy", "Never"},
                {"automountServiceAccountToken", in.automount_token},
                {"enableServiceLinks", false},
                {"containers", json::array({c})}}}};
  if (!volumes.empty()) pod["spec"]["volumes"] = volumes;
  if (in.owner) pod["metadata"]["ownerReferences"] = owner_references(*in.owner);
  if (!in.service_account.empty()) pod["spec"]["serviceAccountName"] = in.service_account;
  if (in.image_pull_secrets.is_array() && !in.image_pull_secrets.empty())
    pod["spec"]["imagePullSecrets"] = in.image_pull_secrets;

  // The patches. Lists fiber fills are extended, not replaced.
  auto extend = [](json& target, const char* key, const json& patch) {
    if (auto it = patch.find(key); it != patch.end() && it->is_array()) {
      auto& t = target[key];
      if (!t.is_array()) t = json::array();
      for (auto& e : *it) t.push_back(e);
    }
  };
  if (in.container_patch.is_object()) {
    auto& cont = pod["spec"]["containers"][0];
    json p = in.container_patch;
    extend(cont, "env", p);
    extend(cont, "volumeMounts", p);
    p.erase("env");
    p.erase("volumeMounts");
    cont.merge_patch(p);
  }
  if (in.pod_patch.is_object()) {
    json p = in.pod_patch;
    if (auto s = p.find("spec"); s != p.end() && s->is_object()) {
      extend(pod["spec"], "volumes", *s);
      s->erase("volumes");
      s->erase("containers"); // the worker's container is container_patch's business
    }
    pod.merge_patch(p);
  }
  auto& cont = pod["spec"]["containers"][0];
  pod["spec"]["restartPolicy"] = "Never";
  pod["metadata"]["name"] = in.name;
  cont["name"] = container_name;
  if (!in.argv.empty()) cont["command"] = json::array({in.argv[0]});
  cont["args"] = c["args"];
  // fiber's variables come first and win over same-named ones a patch added.
  json merged = json::array();
  std::set<std::string> seen;
  for (auto& e : cont["env"])
    if (e.is_object() && seen.insert(e.value("name", "")).second) merged.push_back(e);
  cont["env"] = merged;
  return pod;
}

/// The run's Secret: `data` (key -> bytes) base64-encoded, labelled as the pods.
inline nlohmann::json secret_manifest(const std::string& name, const std::map<std::string, std::string>& labels,
                                      const std::map<std::string, std::string>& data,
                                      const std::optional<owner_ref>& owner) {
  nlohmann::json d = nlohmann::json::object(), l = nlohmann::json::object();
  for (auto& [k, v] : data) d[k] = base64_encode(v);
  for (auto& [k, v] : labels) l[k] = v;
  nlohmann::json s = {{"apiVersion", "v1"},
                      {"kind", "Secret"},
                      {"metadata", {{"name", name}, {"labels", l}}},
                      {"type", "Opaque"},
                      {"data", d}};
  if (owner) s["metadata"]["ownerReferences"] = owner_references(*owner);
  return s;
}

// ---------------------------------------------------------------------------
// What a pod says about its worker
// ---------------------------------------------------------------------------

/// What fiber knows besides the pod object.
struct judge_input {
  int asked = 0;                ///< the last signal fiber asked with cancel() (0: none)
  std::uint64_t asked_mask = 0; ///< every signal asked (bit n: signal n)
  bool deleted = false;         ///< a DELETED event (or the pod is gone from a list)
  int memory_mb = 0;            ///< its memory limit, for the OOM message
};

/// Where a worker's pod stands.
struct verdict {
  enum class stage { waiting, running, ended } what = stage::waiting;
  backend::job_exit exit;      ///< when ended
  std::string pending;         ///< when waiting: why ("Unschedulable: 0/1 nodes are available: ...")
  bool node_not_ready = false; ///< running, but marked not ready by the node controller
};

/// Container states that mean the pod will not start by itself: a start
/// failure (backend_error at once), not something to wait out.
inline bool start_failure_reason(std::string_view r) {
  return r == "ErrImagePull" || r == "ImagePullBackOff" || r == "InvalidImageName" || r == "ErrImageNeverPull" ||
         r == "CreateContainerConfigError" || r == "CreateContainerError" || r == "RegistryUnavailable" ||
         r == "ImageInspectError";
}

namespace wire_impl {

inline const nlohmann::json& field(const nlohmann::json& j, const char* k) {
  static const nlohmann::json none;
  if (!j.is_object()) return none;
  auto it = j.find(k);
  return it == j.end() ? none : *it;
}
inline std::string text(const nlohmann::json& j, const char* k) {
  const auto& v = field(j, k);
  return v.is_string() ? v.get<std::string>() : std::string();
}
inline const nlohmann::json& condition(const nlohmann::json& status, std::string_view type) {
  static const nlohmann::json none;
  const auto& cs = field(status, "conditions");
  if (cs.is_array())
    for (auto& c : cs)
      if (text(c, "type") == type) return c;
  return none;
}
inline std::string joined(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + ": " + b;
}

} // namespace wire_impl

/// Reads a pod object (from a watch event or a list) for fiber: see
/// backend/kubernetes.hpp ("Exits") for the rules.
inline verdict judge(const nlohmann::json& pod, const judge_input& in) {
  using namespace wire_impl;
  using kind = backend::job_exit::kind;
  const auto& md = field(pod, "metadata");
  const auto& st = field(pod, "status");
  const std::string name = text(md, "name"), phase = text(st, "phase");
  const std::string who = "kubernetes: pod " + name;
  const nlohmann::json* cs = nullptr;
  if (const auto& l = field(st, "containerStatuses"); l.is_array())
    for (auto& c : l)
      if (!cs || text(c, "name") == container_name) cs = &c;
  const auto& state = cs ? field(*cs, "state") : field(st, "none");
  const auto& term = field(state, "terminated");
  const auto& waiting = field(state, "waiting");
  const auto& disruption = condition(st, "DisruptionTarget");
  const bool disrupted = text(disruption, "status") == "True";
  const std::string disruption_text = joined(text(disruption, "reason"), text(disruption, "message"));

  verdict v;
  auto ended = [&](backend::job_exit x) {
    v.what = verdict::stage::ended;
    v.exit = std::move(x);
    return v;
  };
  auto lost = [&](std::string why, bool start_failed = false) {
    backend::job_exit x{kind::lost, 0, std::move(why)};
    x.start_failed = start_failed;
    return ended(std::move(x));
  };
  auto exit_of = [&](int code) {
    const bool by_signal = code > 128 && code <= 128 + 64;
    if (in.asked) {
      const int sig = by_signal && (in.asked_mask >> (code - 128) & 1) ? code - 128 : in.asked;
      return ended({kind::signalled, sig, who + " deleted by fiber"});
    }
    if (by_signal) return ended({kind::signalled, code - 128, ""});
    return ended({kind::exited, code, ""});
  };

  if (term.is_object() && text(term, "reason") == "OOMKilled")
    return lost(who + ": OOMKilled: its container exceeded its memory limit" +
                (in.memory_mb > 0 ? " (" + std::to_string(in.memory_mb) + "Mi)" : std::string()) + " and was killed");
  if (text(st, "reason") == "Evicted") return lost(who + " was evicted: " + text(st, "message"));
  if (term.is_object() && (text(term, "reason") == "StartError" || text(term, "reason") == "ContainerCannotRun"))
    return lost(who + ": its container could not start: " + joined(text(term, "reason"), text(term, "message")), true);
  if (waiting.is_object() && start_failure_reason(text(waiting, "reason")))
    return lost(who + " cannot start: " + joined(text(waiting, "reason"), text(waiting, "message")), true);
  if (term.is_object()) {
    if (disrupted && !in.asked) return lost(who + ": " + disruption_text);
    const auto& code = field(term, "exitCode");
    return exit_of(code.is_number_integer() ? code.get<int>() : 1);
  }
  if (phase == "Succeeded") return exit_of(0);
  if (phase == "Failed") {
    if (in.asked && !disrupted) return exit_of(128 + in.asked);
    return lost(who + " failed: " + (disrupted ? disruption_text : joined(text(st, "reason"), text(st, "message"))));
  }
  v.node_not_ready = phase == "Running" && text(condition(st, "Ready"), "status") == "False" && cs &&
                     field(*cs, "ready").is_boolean() && field(*cs, "ready").get<bool>();
  if (in.deleted) {
    if (disrupted) return lost(who + ": " + disruption_text);
    if (in.asked && v.node_not_ready)
      return lost(who + ": its node stopped reporting (pod Ready=False while its container ran); deleted by fiber");
    if (in.asked) return exit_of(128 + in.asked);
    return lost(who + " was deleted by someone else (not by fiber)");
  }
  // Being deleted, not by fiber: a node lost (the taint manager), an eviction, `kubectl delete`.
  if (!field(md, "deletionTimestamp").is_null() && !in.asked)
    return lost(who + (disrupted ? ": " + disruption_text : " is being deleted by someone else (not by fiber)"));
  if (phase == "Running" && field(state, "running").is_object()) {
    v.what = verdict::stage::running;
    return v;
  }
  const auto& sched = condition(st, "PodScheduled");
  if (text(sched, "status") == "False") v.pending = joined(text(sched, "reason"), text(sched, "message"));
  else if (waiting.is_object()) v.pending = joined(text(waiting, "reason"), text(waiting, "message"));
  return v;
}

/// One line of a watch stream.
struct watch_event {
  std::string type;      ///< ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object; ///< the pod (a Status for ERROR)
};

/// Parses one line of a watch stream; nullopt for anything else.
inline std::optional<watch_event> parse_watch_event(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return std::nullopt;
  watch_event e;
  e.type = j["type"].get<std::string>();
  if (auto o = j.find("object"); o != j.end()) e.object = std::move(*o);
  return e;
}

/// metadata.resourceVersion of an object or a list ("" if none).
inline std::string resource_version(const nlohmann::json& j) {
  return wire_impl::text(wire_impl::field(j, "metadata"), "resourceVersion");
}

} // namespace fiber::detail::kube
