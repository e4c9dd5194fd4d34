// SPDX-License-Identifier: BSL-1.0
// Unit tests of the kubernetes backend's pure parts, without an API server:
// the worker pod and the Secret as documents, merge patches, what a pod's
// status says about its worker (job_exit), kubeconfig and ExecCredential
// parsing, credential resolution from files, pod names, and the ephemeral
// TLS certificate (parsed back, and used by a tls+tcp:// listener).

#include <fiber/backend/kubernetes.hpp>
#include <fiber/fiber.hpp>

#include <catch2/catch.hpp>

#if defined(FIBER_HAS_KUBERNETES_BACKEND)

#include <fiber/backend/kubernetes/access.hpp>
#include <fiber/backend/kubernetes/wire.hpp>
#include <fiber/detail/self_signed_cert.hpp>
#include <fiber/detail/transport.hpp>

#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <optional>
#include <string>

#include <unistd.h>

using nlohmann::json;
namespace fs = std::filesystem;
namespace kube = fiber::detail::kube;
using kind = fiber::backend::job_exit::kind;

namespace {

kube::pod_input sample_input() {
  kube::pod_input in;
  in.name = "fiber-abc-pool-1-w1";
  in.image = "registry.example/app:1";
  in.argv = {"/opt/app/bin/app", "--flag", "x"};
  in.env = {{"FIBER_INTERNAL_MASTER", "tls+tcp://10.0.0.5:4000"},
            {"FIBER_INTERNAL_SECRET", "s3cr3t-value"},
            {"FIBER_INTERNAL_WORKER_ID", "7"}};
  in.secret_name = "fiber-abc";
  in.secret_env = {{"FIBER_INTERNAL_SECRET", "fiber-secret"}};
  in.files = {{"tls-0", "/tmp/fiber-x/k8s.crt"}, {"tls-1", "/tmp/fiber-x/k8s.key"}};
  in.labels = {{"app.kubernetes.io/managed-by", "fiber"}, {"fiber.run", "abc"}, {"fiber.worker", "pool-1-w1"}};
  in.resources = {2, 512, 1};
  return in;
}

/// A pod object as the API server reports it.
json pod(std::string phase, json container_state = nullptr, json extra_status = json::object()) {
  json st = {{"phase", phase}};
  if (!container_state.is_null())
    st["containerStatuses"] =
        json::array({{{"name", "worker"}, {"ready", phase == "Running"}, {"state", container_state}}});
  st.merge_patch(extra_status);
  return {{"metadata", {{"name", "fiber-abc-w1"}, {"resourceVersion", "1042"}}}, {"status", st}};
}

json terminated(int code, std::string reason = "Error") {
  return {{"terminated", {{"exitCode", code}, {"reason", reason}}}};
}

std::string temp_dir() {
  std::string t = "/tmp/fiber-kube-unit-XXXXXX";
  REQUIRE(::mkdtemp(t.data()));
  return t;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

} // namespace

TEST_CASE("kubernetes: the worker pod document", "[kube][unit]") {
  auto p = kube::pod_manifest(sample_input());
  auto& spec = p["spec"];
  auto& c = spec["containers"][0];
  CHECK(p["kind"] == "Pod");
  CHECK(p["metadata"]["name"] == "fiber-abc-pool-1-w1");
  CHECK(p["metadata"]["labels"]["fiber.run"] == "abc");
  CHECK(spec["restartPolicy"] == "Never");
  CHECK(spec["automountServiceAccountToken"] == false);
  CHECK(c["name"] == "worker");
  CHECK(c["image"] == "registry.example/app:1");
  CHECK(c["command"] == json::array({"/opt/app/bin/app"}));
  CHECK(c["args"] == json::array({"--flag", "x"}));
  // Requests = limits; memory in Mi; the GPU under its resource name.
  json res = {{"cpu", "2"}, {"memory", "512Mi"}, {"nvidia.com/gpu", "1"}};
  CHECK(c["resources"]["requests"] == res);
  CHECK(c["resources"]["limits"] == res);
  // The secret's value is nowhere in the pod: a secretKeyRef.
  CHECK(p.dump().find("s3cr3t-value") == std::string::npos);
  json want_secret = {{"name", "FIBER_INTERNAL_SECRET"},
                      {"valueFrom", {{"secretKeyRef", {{"name", "fiber-abc"}, {"key", "fiber-secret"}}}}}};
  CHECK(c["env"][1] == want_secret);
  CHECK(c["env"][0] == json({{"name", "FIBER_INTERNAL_MASTER"}, {"value", "tls+tcp://10.0.0.5:4000"}}));
  // TLS files: the Secret's keys mounted one by one at the master's paths.
  CHECK(spec["volumes"][0]["secret"]["secretName"] == "fiber-abc");
  CHECK(spec["volumes"][0]["secret"]["defaultMode"] == 0400); // the owner's alone
  CHECK(spec["volumes"][0]["secret"]["items"][0]["mode"] == 0400);
  CHECK(c["volumeMounts"][0] ==
        json({{"name", "fiber-run"}, {"mountPath", "/tmp/fiber-x/k8s.crt"}, {"subPath", "tls-0"}, {"readOnly", true}}));
  CHECK_FALSE(p["metadata"].contains("ownerReferences"));

  auto in = sample_input();
  in.owner = kube::owner_ref{"master-pod", "uid-1"};
  in.resources = {0, 0, 0};
  in.gpu_resource = "amd.com/gpu";
  in.service_account = "runner";
  in.image_pull_policy = "IfNotPresent";
  p = kube::pod_manifest(in);
  CHECK(p["metadata"]["ownerReferences"][0]["uid"] == "uid-1");
  CHECK(p["metadata"]["ownerReferences"][0]["kind"] == "Pod");
  CHECK_FALSE(p["spec"]["containers"][0].contains("resources"));
  CHECK(p["spec"]["serviceAccountName"] == "runner");
  CHECK(p["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent");
}

TEST_CASE("kubernetes: merge patches on the pod and the container", "[kube][unit]") {
  auto in = sample_input();
  in.pod_patch = json::parse(R"({
    "metadata": {"labels": {"team": "rl"}, "annotations": {"a": "b"}},
    "spec": {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
             "restartPolicy": "Always", "automountServiceAccountToken": null,
             "volumes": [{"name": "data", "emptyDir": {}}], "containers": [{"name": "evil"}]}})");
  in.container_patch = json::parse(R"({
    "securityContext": {"runAsNonRoot": true}, "resources": {"limits": {"cpu": "4"}},
    "env": [{"name": "EXTRA", "value": "1"}, {"name": "FIBER_INTERNAL_MASTER", "value": "tcp://evil:1"}],
    "volumeMounts": [{"name": "data", "mountPath": "/data"}], "command": ["/bin/false"], "name": "other"})");
  auto p = kube::pod_manifest(in);
  auto& spec = p["spec"];
  auto& c = spec["containers"][0];
  CHECK(p["metadata"]["labels"]["team"] == "rl");
  CHECK(p["metadata"]["labels"]["fiber.run"] == "abc"); // objects merge
  CHECK(p["metadata"]["annotations"]["a"] == "b");
  CHECK(spec["nodeSelector"]["pool"] == "gpu");
  CHECK(spec["tolerations"][0]["key"] == "gpu");
  CHECK_FALSE(spec.contains("automountServiceAccountToken")); // null deletes (RFC 7386)
  CHECK(spec["restartPolicy"] == "Never");                    // what the exits depend on stays
  CHECK(spec["containers"].size() == 1);
  CHECK(c["name"] == "worker");
  CHECK(c["command"] == json::array({"/opt/app/bin/app"}));
  CHECK(c["securityContext"]["runAsNonRoot"] == true);
  CHECK(c["resources"]["limits"]["cpu"] == "4");
  CHECK(c["resources"]["limits"]["memory"] == "512Mi");
  // env, volumeMounts, volumes: added to fiber's; fiber's variables win.
  CHECK(c["env"].size() == 4);
  CHECK(c["env"][0]["value"] == "tls+tcp://10.0.0.5:4000");
  CHECK(c["env"][3] == json({{"name", "EXTRA"}, {"value", "1"}}));
  CHECK(c["volumeMounts"].size() == 3);
  CHECK(spec["volumes"].size() == 2);
}

TEST_CASE("kubernetes: the run's Secret", "[kube][unit]") {
  auto s = kube::secret_manifest("fiber-abc", {{"fiber.run", "abc"}}, {{"fiber-secret", "s3cr3t"}, {"tls-0", "PEM\n"}},
                                 kube::owner_ref{"m", "u"});
  CHECK(s["kind"] == "Secret");
  CHECK(s["type"] == "Opaque");
  CHECK(s["data"]["fiber-secret"] == kube::base64_encode("s3cr3t"));
  CHECK(kube::base64_decode(s["data"]["tls-0"].get<std::string>()) == std::optional<std::string>("PEM\n"));
  CHECK(s["metadata"]["ownerReferences"][0]["name"] == "m");
  CHECK_FALSE(kube::base64_decode("not base64!"));
}

TEST_CASE("kubernetes: pod status -> job_exit", "[kube][unit]") {
  kube::judge_input none;
  SECTION("exit codes") {
    auto v = kube::judge(pod("Succeeded", terminated(0, "Completed")), none);
    REQUIRE(v.what == kube::verdict::stage::ended);
    CHECK(v.exit.how == kind::exited);
    CHECK(v.exit.exitcode() == 0);
    CHECK(kube::judge(pod("Failed", terminated(7)), none).exit.exitcode() == 7);
    CHECK(kube::judge(pod("Failed", terminated(138)), none).exit.exitcode() == -10); // died of SIGUSR1
    CHECK(kube::judge(pod("Failed", terminated(255)), none).exit.exitcode() == 255);
  }
  SECTION("asked by fiber: -15 / -9 whatever the container said") {
    kube::judge_input term{15, 1u << 15, false, 0};
    CHECK(kube::judge(pod("Failed", terminated(143)), term).exit.exitcode() == -15);
    CHECK(kube::judge(pod("Failed", terminated(137)), term).exit.exitcode() == -15);
    kube::judge_input both{9, (1u << 15) | (1u << 9), false, 0};
    CHECK(kube::judge(pod("Failed", terminated(143)), both).exit.exitcode() == -15); // it did get the TERM
    kube::judge_input killed{9, 1u << 9, true, 0};
    auto v = kube::judge(pod("Running", json{{"running", json::object()}}), killed); // grace 0: DELETED at once
    CHECK(v.what == kube::verdict::stage::ended);
    CHECK(v.exit.exitcode() == -9);
    CHECK(v.exit.how == kind::signalled);
  }
  SECTION("lost, with Kubernetes' reason") {
    auto oom = kube::judge(pod("Failed", terminated(137, "OOMKilled")), {0, 0, false, 64});
    CHECK(oom.exit.how == kind::lost);
    CHECK_THAT(oom.exit.reason, Catch::Contains("OOMKilled") && Catch::Contains("64Mi"));
    auto oom_asked = kube::judge(pod("Failed", terminated(137, "OOMKilled")), {9, 1u << 9, false, 0});
    CHECK(oom_asked.exit.how == kind::lost); // out of memory beats what fiber asked after the link broke

    auto ev = kube::judge(pod("Failed", terminated(137),
                              {{"reason", "Evicted"}, {"message", "The node was low on resource: memory."}}),
                          none);
    CHECK(ev.exit.how == kind::lost);
    CHECK_THAT(ev.exit.reason, Catch::Contains("evicted") && Catch::Contains("low on resource"));

    auto gone = kube::judge(pod("Running", json{{"running", json::object()}}), {0, 0, true, 0});
    CHECK(gone.exit.how == kind::lost);
    CHECK_THAT(gone.exit.reason, Catch::Contains("deleted by someone else"));

    auto deleting = pod("Running", json{{"running", json::object()}});
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    CHECK_THAT(kube::judge(deleting, none).exit.reason, Catch::Contains("being deleted by someone else"));
    CHECK(kube::judge(deleting, {15, 1u << 15, false, 0}).what == kube::verdict::stage::running);

    auto node = pod("Running", json{{"running", json::object()}},
                    {{"conditions", json::array({{{"type", "Ready"}, {"status", "False"}},
                                                 {{"type", "DisruptionTarget"},
                                                  {"status", "True"},
                                                  {"reason", "DeletionByTaintManager"},
                                                  {"message", "Taint manager: deleting due to NoExecute taint"}}})}});
    node["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
    auto nl = kube::judge(node, none);
    CHECK(nl.exit.how == kind::lost);
    CHECK_THAT(nl.exit.reason, Catch::Contains("DeletionByTaintManager"));

    auto not_ready = pod("Running", json{{"running", json::object()}},
                         {{"conditions", json::array({{{"type", "Ready"}, {"status", "False"}}})}});
    auto nr = kube::judge(not_ready, none);
    CHECK(nr.what == kube::verdict::stage::running);
    CHECK(nr.node_not_ready);
    auto nr_killed = kube::judge(not_ready, {9, 1u << 9, true, 0});
    CHECK(nr_killed.exit.how == kind::lost);
    CHECK_THAT(nr_killed.exit.reason, Catch::Contains("node stopped reporting"));
  }
  SECTION("start failures: at once, with Kubernetes' message") {
    for (auto reason : {"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName"}) {
      auto v = kube::judge(pod("Pending", json{{"waiting", {{"reason", reason}, {"message", "the words"}}}}), none);
      INFO(reason);
      REQUIRE(v.what == kube::verdict::stage::ended);
      CHECK(v.exit.start_failed);
      CHECK_THAT(v.exit.reason, Catch::Contains(reason) && Catch::Contains("the words"));
    }
    auto se = kube::judge(pod("Failed", terminated(128, "StartError")), none);
    CHECK(se.exit.start_failed);
  }
  SECTION("waiting, with the reason to log") {
    auto v =
        kube::judge(pod("Pending", nullptr,
                        {{"conditions", json::array({{{"type", "PodScheduled"},
                                                      {"status", "False"},
                                                      {"reason", "Unschedulable"},
                                                      {"message", "0/1 nodes are available: 1 Insufficient cpu."}}})}}),
                    none);
    CHECK(v.what == kube::verdict::stage::waiting);
    CHECK(v.pending == "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.");
    CHECK(kube::judge(pod("Pending", json{{"waiting", {{"reason", "ContainerCreating"}}}}), none).pending ==
          "ContainerCreating");
    CHECK(kube::judge(pod("Running", json{{"running", json::object()}}), none).what == kube::verdict::stage::running);
  }
}

TEST_CASE("kubernetes: watch events, Status messages, names", "[kube][unit]") {
  auto e = kube::parse_watch_event(R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})");
  REQUIRE(e);
  CHECK(e->type == "ERROR");
  CHECK(e->object["code"] == 410);
  CHECK_FALSE(kube::parse_watch_event("not json"));
  CHECK(kube::resource_version(pod("Running")) == "1042");
  auto body =
      R"({"kind":"Status","status":"Failure","message":"pods is forbidden: User \"u\" cannot create","reason":"Forbidden","code":403})";
  CHECK(kube::status_message(403, body) == "pods is forbidden: User \"u\" cannot create (Forbidden, HTTP 403)");
  CHECK(kube::status_reason(body) == "Forbidden");
  CHECK(kube::status_message(502, "Bad Gateway\n") == "Bad Gateway (HTTP 502)");

  CHECK(kube::pod_name("1a2b3c4d", "pool-1-w3") == "fiber-1a2b3c4d-pool-1-w3");
  CHECK(kube::pod_name("1a2b3c4d", "My_Process.2") == "fiber-1a2b3c4d-my-process-2");
  auto long_name = kube::pod_name("1a2b3c4d", std::string(100, 'x'));
  CHECK(long_name.size() <= 63);
  CHECK(long_name != kube::pod_name("1a2b3c4d", std::string(101, 'x')));
  CHECK(kube::label_value("-pool 1/w3-") == "pool-1-w3");
  using hp = std::pair<std::string, std::string>;
  CHECK(kube::split_server("https://10.0.0.1:6443") == hp{"10.0.0.1", "6443"});
  CHECK(kube::split_server("https://k8s.example/prefix") == hp{"k8s.example", "443"});
  CHECK(kube::split_server("http://127.0.0.1:8001/") == hp{"127.0.0.1", "8001"});
  CHECK(kube::split_server("https://[fd00::1]:443") == hp{"fd00::1", "443"});
  CHECK(kube::label_value(std::string(80, 'a')).size() == 63);
}

TEST_CASE("kubernetes: kubeconfig documents", "[kube][unit]") {
  auto cfg = json::parse(R"({
    "current-context": "prod",
    "clusters": [{"name": "c1", "cluster": {"server": "https://k8s.example:6443/",
                  "certificate-authority-data": ")" +
                         kube::base64_encode("CA PEM") + R"(", "proxy-url": "http://proxy:3128"}},
                 {"name": "c2", "cluster": {"server": "https://other", "certificate-authority": "ca.crt",
                  "insecure-skip-tls-verify": true}}],
    "users": [{"name": "u1", "user": {"token": "t0k3n"}},
              {"name": "u2", "user": {"client-certificate": "c.crt", "client-key-data": ")" +
                         kube::base64_encode("KEY") + R"("}},
              {"name": "u3", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "gke-gcloud-auth-plugin",
                "args": ["--x"], "env": [{"name": "A", "value": "b"}], "installHint": "install it", "provideClusterInfo": true}}},
              {"name": "u4", "user": {"auth-provider": {"name": "gcp"}}}],
    "contexts": [{"name": "prod", "context": {"cluster": "c1", "user": "u1", "namespace": "ml"}},
                 {"name": "dev", "context": {"cluster": "c2", "user": "u2"}},
                 {"name": "gke", "context": {"cluster": "c1", "user": "u3"}},
                 {"name": "old", "context": {"cluster": "c1", "user": "u4"}}]})");
  auto a = kube::from_kubeconfig(cfg, "", "/home/me/.kube", "cfg");
  CHECK(a.server == "https://k8s.example:6443");
  CHECK(a.tls.ca_pem == "CA PEM");
  CHECK(a.token == "t0k3n");
  CHECK(a.namespace_ == "ml");
  CHECK(a.proxy == "http://proxy:3128");
  CHECK_THAT(a.source, Catch::Contains("context prod"));

  auto d = kube::from_kubeconfig(cfg, "dev", "/home/me/.kube", "cfg");
  CHECK(d.tls.ca_file == "/home/me/.kube/ca.crt"); // relative to the kubeconfig
  CHECK_FALSE(d.tls.verify_peer);
  CHECK_THAT(fiber::detail::http::exposure(d.server, d.tls), Catch::Contains("certificate is not checked"));
  CHECK(fiber::detail::http::exposure(a.server, a.tls).empty());
  CHECK(d.tls.cert_file == "/home/me/.kube/c.crt");
  CHECK(d.tls.key_pem == "KEY");
  CHECK(d.token.empty());

  auto g = kube::from_kubeconfig(cfg, "gke", "/x", "cfg");
  REQUIRE(g.exec);
  CHECK(g.exec->command == "gke-gcloud-auth-plugin");
  CHECK(g.exec->args == std::vector<std::string>{"--x"});
  CHECK(g.exec->env == std::vector<std::pair<std::string, std::string>>{{"A", "b"}});
  CHECK(g.exec->provide_cluster_info);
  CHECK(g.exec->cluster["server"] == "https://k8s.example:6443");

  CHECK_THROWS_WITH(kube::from_kubeconfig(cfg, "old", "/x", "cfg"), Catch::Contains("auth-provider"));
  CHECK_THROWS_WITH(kube::from_kubeconfig(cfg, "nope", "/x", "cfg"), Catch::Contains("no context named 'nope'"));
  CHECK_THROWS_AS(kube::from_kubeconfig(json::object(), "", "/x", "cfg"), fiber::backend_error);
}

TEST_CASE("kubernetes: ExecCredential and RFC 3339 times", "[kube][unit]") {
  auto c = kube::parse_exec_credential(
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",
          "status":{"token":"abc","expirationTimestamp":"2030-01-02T03:04:05Z"}})",
      "plugin", "client.authentication.k8s.io/v1");
  CHECK(c.token == "abc");
  REQUIRE(c.expiry);
  CHECK(std::chrono::system_clock::to_time_t(*c.expiry) == 1893553445);
  CHECK_THROWS_WITH(kube::parse_exec_credential(R"({"kind":"ExecCredential","status":{}})", "p"),
                    Catch::Contains("neither a token"));
  CHECK_THROWS_WITH(kube::parse_exec_credential("oops", "p"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(
      kube::parse_exec_credential(
          R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"x"}})",
          "p", "client.authentication.k8s.io/v1"),
      Catch::Contains("v1beta1"));
  auto t = [](const char* s) { return std::chrono::system_clock::to_time_t(*kube::parse_rfc3339(s)); };
  CHECK(t("1970-01-01T00:00:00Z") == 0);
  CHECK(t("1970-01-01T01:00:00.123456+01:00") == 0);
  CHECK(t("1970-01-01T00:00:00-00:30") == 1800);
  CHECK_FALSE(kube::parse_rfc3339("2030-01-02 03:04:05"));
  CHECK_FALSE(kube::parse_rfc3339("2030-01-02T03:04:05"));
}

TEST_CASE("kubernetes: where the credentials come from", "[kube][unit]") {
  auto dir = temp_dir();
  write(dir + "/token", "sa-token\n");
  write(dir + "/ca.crt", "CA");
  write(dir + "/namespace", "team-a\n");
  fiber::detail::kube_options o;
  o.service_account_dir = dir;
  o.kubectl = "/nonexistent/kubectl"; // a JSON kubeconfig is then read directly

  auto a = kube::resolve(o, {"10.96.0.1", "443", "", ""});
  CHECK(a.in_cluster);
  CHECK(a.server == "https://10.96.0.1:443");
  CHECK(a.token_file == dir + "/token");
  CHECK(a.tls.ca_file == dir + "/ca.crt");
  CHECK(a.namespace_ == "team-a");
  CHECK(kube::resolve(o, {"fd00::1", "443", "", ""}).server == "https://[fd00::1]:443");

  write(dir + "/kubeconfig",
        R"({"current-context":"c","contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}],
            "clusters":[{"name":"k","cluster":{"server":"https://127.0.0.1:1"}}],"users":[{"name":"u","user":{"token":"kc"}}]})");
  auto k = kube::resolve(o, {"", "", dir + "/kubeconfig", ""}); // not in a pod: the kubeconfig
  CHECK_FALSE(k.in_cluster);
  CHECK(k.token == "kc");
  o.credentials = "kubeconfig";
  CHECK(kube::resolve(o, {"10.96.0.1", "443", dir + "/kubeconfig", ""}).token == "kc");
  write(dir + "/yaml", "apiVersion: v1\nkind: Config\n");
  CHECK_THROWS_WITH(kube::resolve(o, {"", "", dir + "/yaml", ""}),
                    Catch::Contains("not JSON") && Catch::Contains("kubectl"));

  o.credentials = "auto";
  o.api_server = "http://127.0.0.1:8001/";
  CHECK(kube::resolve(o, {"", "", "", "/nonexistent-home"}).server == "http://127.0.0.1:8001");
  o.api_server.clear();
  CHECK_THROWS_WITH(kube::resolve(o, {"", "", "", "/nonexistent-home"}), Catch::Contains("no API server"));
  o.credentials = "in-cluster";
  CHECK_THROWS_WITH(kube::resolve(o, {"", "", "", ""}), Catch::Contains("KUBERNETES_SERVICE_HOST"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("kubernetes: the ephemeral certificate parses, matches its key, and serves tls+tcp", "[kube][unit][tls]") {
  auto t0 = std::chrono::steady_clock::now();
  auto id = fiber::detail::make_self_signed("fiber-unit");
  auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("self-signed ECDSA P-256 certificate made in %.1f ms\n", ms);
  mbedtls_x509_crt crt;
  mbedtls_pk_context key;
  mbedtls_x509_crt_init(&crt);
  mbedtls_pk_init(&key);
  REQUIRE(mbedtls_x509_crt_parse(&crt, reinterpret_cast<const unsigned char*>(id.cert_pem.c_str()),
                                 id.cert_pem.size() + 1) == 0);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
  REQUIRE(mbedtls_pk_parse_key(&key, reinterpret_cast<const unsigned char*>(id.key_pem.c_str()), id.key_pem.size() + 1,
                               nullptr, 0, nullptr, nullptr) == 0);
  CHECK(mbedtls_pk_check_pair(&crt.pk, &key, nullptr, nullptr) == 0);
#else
  REQUIRE(mbedtls_pk_parse_key(&key, reinterpret_cast<const unsigned char*>(id.key_pem.c_str()), id.key_pem.size() + 1,
                               nullptr, 0) == 0);
  CHECK(mbedtls_pk_check_pair(&crt.pk, &key) == 0);
#endif
  char subject[256];
  mbedtls_x509_dn_gets(subject, sizeof subject, &crt.subject);
  CHECK(std::string(subject) == "CN=fiber-unit");
  REQUIRE(crt.subject_alt_names.buf.p != nullptr); // the name the workers verify
  CHECK(std::string(reinterpret_cast<const char*>(crt.subject_alt_names.buf.p), crt.subject_alt_names.buf.len) ==
        "fiber-unit");
  CHECK(mbedtls_x509_time_is_past(&crt.valid_from));
  CHECK(mbedtls_x509_time_is_future(&crt.valid_to));
  mbedtls_x509_crt_free(&crt);
  mbedtls_pk_free(&key);
  CHECK(fiber::detail::make_self_signed("fiber-unit").cert_pem != id.cert_pem); // fresh key and serial each time

  // Written 0600; a tls+tcp:// listener with it. A client that pins it
  // (its CA, its name) connects; one that pins another certificate of the
  // same name, or expects another name, is refused: a relay with its own
  // certificate passes neither.
  auto dir = temp_dir();
  auto written = fiber::detail::make_self_signed("fiber-unit");
  const auto crt_file = fiber::detail::write_private_file(dir + "/c.crt", written.cert_pem);
  const auto key_file = fiber::detail::write_private_file(dir + "/c.key", written.key_pem);
  const auto other_crt = fiber::detail::write_private_file(dir + "/other.crt",
                                                           fiber::detail::make_self_signed("fiber-unit").cert_pem);
  CHECK(crt_file == dir + "/c.crt");
  CHECK((fs::status(key_file).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  fiber::detail::transport_options server;
  server.tls_cert_file = crt_file;
  server.tls_key_file = key_file;
  auto exchange = [&](fiber::detail::transport_options client) {
    asio::io_context io;
    fiber::detail::listener l(io.get_executor(), "tls+tcp://127.0.0.1:0", server);
    std::string got;
    std::optional<fiber::detail::stream> srv, cli;
    l.async_accept([&](std::error_code ec, fiber::detail::stream s) {
      if (ec) return;
      srv.emplace(std::move(s));
      srv->async_recv([&](std::error_code ec2, fiber::detail::message m) {
        got = ec2 ? "recv: " + ec2.message() : std::string(reinterpret_cast<const char*>(m.data()), m.size());
      });
    });
    fiber::detail::async_connect(io.get_executor(), l.url(), client, [&](std::error_code ec, fiber::detail::stream s) {
      if (ec) return void(got = "connect: " + ec.message());
      cli.emplace(std::move(s));
      const std::string hello = "hello over tls";
      fiber::detail::message m(hello.size());
      std::memcpy(m.data(), hello.data(), hello.size());
      cli->async_send(std::move(m), [&](std::error_code e) {
        if (e) got = "send: " + e.message();
      });
    });
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         got.empty() && std::chrono::steady_clock::now() < deadline;)
      io.run_for(std::chrono::milliseconds(50));
    srv.reset();
    cli.reset();
    l = fiber::detail::listener{};
    io.run_for(std::chrono::milliseconds(50));
    return got;
  };
  fiber::detail::transport_options pinned;
  pinned.tls_ca_file = crt_file;
  pinned.tls_server_name = "fiber-unit";
  CHECK(exchange(pinned) == "hello over tls");
  auto wrong_name = pinned;
  wrong_name.tls_server_name = "fiber-other";
  CHECK(exchange(wrong_name) != "hello over tls");
  auto wrong_cert = pinned;
  wrong_cert.tls_ca_file = other_crt;
  CHECK(exchange(wrong_cert) != "hello over tls");
  std::filesystem::remove_all(dir);
}

#else
TEST_CASE("kubernetes: not built (no libcurl or nlohmann-json headers)", "[kube][unit]") { SUCCEED(); }
#endif
