// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/shell_words.hpp
/// Words of a command line: quoting for POSIX sh, splitting as sh splits
/// (no expansion), and the small string helpers command parsing needs.

#include <fiber/error.hpp>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Quote `s` for POSIX sh: 'it'\''s'.
inline std::string sh_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

/// Split `s` the way sh splits words: blanks separate; '...' is literal;
/// "..." allows \" \\ \$ \` escapes; a backslash outside quotes escapes the
/// next character. No expansion of any kind. Throws fiber::backend_error on
/// an unterminated quote.
inline std::vector<std::string> shell_split(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(std::exchange(cur, {}));
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      auto end = s.find('\'', i + 1);
      if (end == std::string_view::npos) throw backend_error("unterminated ' in '" + std::string(s) + "'");
      cur.append(s.substr(i + 1, end - i - 1));
      i = end;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != '"'; ++j) {
        if (s[j] == '\\' && j + 1 < s.size() && std::string_view("\"\\$`").find(s[j + 1]) != std::string_view::npos)
          ++j;
        cur += s[j];
      }
      if (j >= s.size()) throw backend_error("unterminated \" in '" + std::string(s) + "'");
      i = j;
    } else if (c == '\\' && i + 1 < s.size()) {
      cur += s[++i];
    } else {
      cur += c;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

/// A name sh can export: [A-Za-z_][A-Za-z0-9_]*.
inline bool is_shell_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

inline std::string trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

inline std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

} // namespace fiber::detail
