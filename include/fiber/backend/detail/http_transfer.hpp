// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/http_transfer.hpp
/// One libcurl transfer of fiber's HTTP client: the easy handle made from a
/// request, and the callbacks through which libcurl hands over headers and
/// body pieces. Used by http_client.hpp only.

#include <fiber/backend/detail/http_types.hpp>

#include <asio/cancellation_signal.hpp>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <unistd.h>

namespace fiber::detail::http {

namespace impl_ {

struct transfer;

/// Where a transfer's callbacks report (the client's implementation; null
/// for perform_blocking's transfers), and who must forget a socket before
/// curl closes it.
struct sink {
  virtual void head(transfer& t) = 0;        // a 2xx status and its headers arrived
  virtual void data(transfer& t) = 0;        // t.pending grew
  virtual void forget(curl_socket_t fd) = 0; // curl is about to close fd
  virtual ~sink() = default;
};

struct transfer {
  sink* owner = nullptr;
  std::uint64_t id = 0;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  request req;
  response resp;
  char errbuf[CURL_ERROR_SIZE] = {};
  bool streaming = false, head_posted = false, flush_posted = false, done = false, too_large = false;
  std::string pending; // stream data not yet handed to on_data
  stream_handlers handlers;
  unique_function<void(std::error_code, response)> complete;
  asio::cancellation_slot slot;
};

inline size_t on_header(char* p, size_t size, size_t n, void* ud) {
  auto& t = *static_cast<transfer*>(ud);
  std::string_view line(p, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line.starts_with("HTTP/")) { // a new response (after a 1xx, say): start over
    t.resp.headers.clear();
    auto sp = line.find(' ');
    t.resp.status = sp == std::string_view::npos
                        ? 0
                        : std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
  } else if (line.empty()) {
    if (t.streaming && t.owner && !t.head_posted && t.resp.status >= 200 && t.resp.status < 300) {
      t.head_posted = true;
      t.owner->head(t);
    }
  } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    auto value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    t.resp.headers.emplace_back(std::move(name), std::string(value));
  }
  return size * n;
}

inline size_t on_write(char* p, size_t size, size_t n, void* ud) {
  auto& t = *static_cast<transfer*>(ud);
  const size_t len = size * n;
  if (t.streaming && t.owner && t.resp.status >= 200 && t.resp.status < 300) {
    t.pending.append(p, len);
    t.owner->data(t);
    return len;
  }
  if (t.resp.body.size() + len > t.req.max_body) {
    t.too_large = true;
    return 0; // CURLE_WRITE_ERROR
  }
  t.resp.body.append(p, len);
  return len;
}

inline int on_close_socket(void* clientp, curl_socket_t fd) {
  if (clientp) static_cast<sink*>(clientp)->forget(fd);
  return ::close(fd);
}

/// An easy handle for `t`, configured from t->req. Throws std::runtime_error
/// (libcurl missing, option refused).
inline void setup_easy(const curl_api& api, transfer& t, sink* owner) {
  t.owner = owner;
  auto& r = t.req;
  t.easy = api.easy_init();
  if (!t.easy) throw std::runtime_error("curl_easy_init failed");
  CURL* e = t.easy;
  auto set = [&](CURLoption o, auto v) {
    if (auto rc = api.easy_setopt(e, o, v); rc != CURLE_OK)
      throw std::runtime_error(std::string("libcurl refused an option: ") + api.easy_strerror(rc));
  };
  set(CURLOPT_URL, r.url.c_str());
  set(CURLOPT_NOSIGNAL, 1L);
  set(CURLOPT_PRIVATE, static_cast<void*>(&t));
  set(CURLOPT_ERRORBUFFER, t.errbuf);
  set(CURLOPT_HEADERFUNCTION, &on_header);
  set(CURLOPT_HEADERDATA, static_cast<void*>(&t));
  set(CURLOPT_WRITEFUNCTION, &on_write);
  set(CURLOPT_WRITEDATA, static_cast<void*>(&t));
  set(CURLOPT_CLOSESOCKETFUNCTION, &on_close_socket);
  set(CURLOPT_CLOSESOCKETDATA, static_cast<void*>(owner));
  set(CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_1_1));
  set(CURLOPT_CONNECTTIMEOUT_MS, long(r.connect_timeout.count()));
  set(CURLOPT_TIMEOUT_MS, long(r.timeout.count()));
  set(CURLOPT_TCP_KEEPALIVE, 1L);
  if (!r.proxy.empty()) set(CURLOPT_PROXY, r.proxy.c_str());
  else if (!r.use_env_proxy) set(CURLOPT_PROXY, ""); // "" disables the *_proxy variables
  if (!r.unix_socket.empty()) set(CURLOPT_UNIX_SOCKET_PATH, r.unix_socket.c_str());

  const bool with_body = !r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH";
  if (with_body) {
    set(CURLOPT_POSTFIELDS, r.body.data());
    set(CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(r.body.size()));
  }
  if (r.method == "HEAD") set(CURLOPT_NOBODY, 1L);
  else if (r.method != (with_body ? "POST" : "GET")) set(CURLOPT_CUSTOMREQUEST, r.method.c_str());
  else if (!with_body) set(CURLOPT_HTTPGET, 1L);

  for (auto& [k, v] : r.headers) t.headers = api.slist_append(t.headers, (k + ": " + v).c_str());
  if (!r.bearer_token.empty())
    t.headers = api.slist_append(t.headers, ("Authorization: Bearer " + r.bearer_token).c_str());
  t.headers = api.slist_append(t.headers, "Expect:"); // no 100-continue round trip for larger bodies
  set(CURLOPT_HTTPHEADER, t.headers);

  auto& tls = r.tls;
  auto blob = [](std::string& s) { return curl_blob{s.data(), s.size(), CURL_BLOB_NOCOPY}; };
  if (!tls.ca_pem.empty()) {
    curl_blob b = blob(tls.ca_pem);
    set(CURLOPT_CAINFO_BLOB, &b);
  } else if (!tls.ca_file.empty()) {
    set(CURLOPT_CAINFO, tls.ca_file.c_str());
  }
  if (!tls.cert_pem.empty()) {
    curl_blob b = blob(tls.cert_pem);
    set(CURLOPT_SSLCERT_BLOB, &b);
  } else if (!tls.cert_file.empty()) {
    set(CURLOPT_SSLCERT, tls.cert_file.c_str());
  }
  if (!tls.key_pem.empty()) {
    curl_blob b = blob(tls.key_pem);
    set(CURLOPT_SSLKEY_BLOB, &b);
  } else if (!tls.key_file.empty()) {
    set(CURLOPT_SSLKEY, tls.key_file.c_str());
  }
  if (!tls.cert_pem.empty() || !tls.cert_file.empty()) set(CURLOPT_SSLCERTTYPE, "PEM");
  if (!tls.key_pem.empty() || !tls.key_file.empty()) set(CURLOPT_SSLKEYTYPE, "PEM");
  if (!tls.verify_peer) {
    set(CURLOPT_SSL_VERIFYPEER, 0L);
    set(CURLOPT_SSL_VERIFYHOST, 0L);
  }
}

inline void cleanup_easy(const curl_api& api, transfer& t) {
  if (t.easy) api.easy_cleanup(t.easy);
  if (t.headers) api.slist_free_all(t.headers);
  t.easy = nullptr;
  t.headers = nullptr;
}

/// The outcome of a finished easy handle.
inline std::error_code finish_code(const curl_api& api, transfer& t, CURLcode rc) {
  long status = 0;
  api.easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  if (status) t.resp.status = status;
  if (rc == CURLE_OK) return {};
  t.resp.error = t.errbuf[0] ? std::string(t.errbuf) : std::string(api.easy_strerror(rc));
  if (t.too_large) t.resp.error = "response body over " + std::to_string(t.req.max_body) + " bytes";
  return make_error(rc);
}

} // namespace impl_

} // namespace fiber::detail::http
