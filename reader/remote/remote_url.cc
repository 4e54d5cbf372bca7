#include "reader/remote/remote_url.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

namespace kiln::remote {
namespace {

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string PercentEncodeKey(std::string_view key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Reads `path` into an IniFile; a missing file gives an empty one.
Result<IniFile> ReadIniFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IniFile{};
  std::stringstream text;
  text << in.rdbuf();
  return ParseIni(text.str(), path);
}

std::string Lookup(const IniFile& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return {};
  auto k = s->second.find(key);
  return k == s->second.end() ? std::string() : k->second;
}

}  // namespace

bool IsRemoteUrl(std::string_view name) {
  return StartsWith(name, "s3://") || StartsWith(name, "http://") || StartsWith(name, "https://");
}

Result<RemoteUrl> ParseRemoteUrl(std::string_view url) {
  RemoteUrl out;
  out.text = std::string(url);
  std::string_view rest;
  if (StartsWith(url, "s3://")) {
    out.scheme = RemoteUrl::Scheme::kS3;
    rest = url.substr(5);
  } else if (StartsWith(url, "http://")) {
    out.scheme = RemoteUrl::Scheme::kHttp;
    rest = url.substr(7);
  } else if (StartsWith(url, "https://")) {
    out.scheme = RemoteUrl::Scheme::kHttps;
    rest = url.substr(8);
  } else {
    return Status::InvalidArgument(out.text + ": not a remote URL (s3://, http:// or https://)");
  }
  size_t slash = rest.find('/');
  std::string first(rest.substr(0, slash));
  std::string tail =
      slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash));
  if (first.empty()) return Status::InvalidArgument(out.text + ": no bucket or host in the URL");
  if (out.scheme == RemoteUrl::Scheme::kS3) {
    out.bucket = first;
    out.key = tail.empty() ? std::string() : tail.substr(1);
    if (out.key.empty())
      return Status::InvalidArgument(out.text + ": no object key after the bucket");
  } else {
    out.host = first;
    out.key = tail.empty() ? "/" : tail;
  }
  return out;
}

Result<IniFile> ParseIni(std::string_view text, const std::string& path) {
  IniFile ini;
  std::string section, parent_key;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                       ": section header without ']'");
      }
      section = Trim(std::string_view(line).substr(1, line.size() - 2));
      ini[section];
      parent_key.clear();
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) +
                                     ": expected [section] or key = value");
    }
    std::string key = Trim(std::string_view(line).substr(0, eq));
    std::string value = Trim(std::string_view(line).substr(eq + 1));
    bool indented = !raw.empty() && (raw[0] == ' ' || raw[0] == '\t');
    if (indented && !parent_key.empty()) {
      ini[section][parent_key + "." + key] = value;
      continue;
    }
    ini[section][key] = value;
    parent_key = value.empty() ? key : std::string();
  }
  return ini;
}

Result<AwsSettings> LoadAwsSettings(const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) {
    const char* v = getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  AwsSettings out;
  std::string home = env("HOME");
  std::string cred_path = env("AWS_SHARED_CREDENTIALS_FILE");
  if (cred_path.empty()) cred_path = home + "/.aws/credentials";
  std::string config_path = env("AWS_CONFIG_FILE");
  if (config_path.empty()) config_path = home + "/.aws/config";
  KILN_ASSIGN_OR_RETURN(IniFile creds, ReadIniFile(cred_path));
  KILN_ASSIGN_OR_RETURN(IniFile config, ReadIniFile(config_path));
  std::string named = env("AWS_PROFILE");
  if (!named.empty()) out.profile = named;
  std::string config_section = out.profile == "default" ? "default" : "profile " + out.profile;
  bool in_creds = creds.count(out.profile) > 0, in_config = config.count(config_section) > 0;
  if (!named.empty() && !in_creds && !in_config) {
    return Status::InvalidArgument("AWS_PROFILE=" + named + ": no [" + named + "] in " + cred_path +
                                   " and no [" + config_section + "] in " + config_path);
  }
  auto profile_value = [&](const std::string& key) {
    std::string v = Lookup(creds, out.profile, key);
    return v.empty() ? Lookup(config, config_section, key) : v;
  };
  // One half of a key pair is a mistake, never a reason to fall back to other keys (or to none):
  // refused as the AWS CLI refuses it (PartialCredentialsError).
  auto partial = [](const std::string& where, const char* has, const char* lacks) {
    return Status::InvalidArgument("partial AWS credentials in " + where + ": " + has +
                                   " is set but " + lacks + " is not");
  };
  const bool env_id = !env("AWS_ACCESS_KEY_ID").empty();
  const bool env_secret = !env("AWS_SECRET_ACCESS_KEY").empty();
  if (env_id != env_secret) {
    return env_id ? partial("the environment", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
                  : partial("the environment", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID");
  }
  if (env_id) {
    out.access_key_id = env("AWS_ACCESS_KEY_ID");
    out.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
    out.session_token = env("AWS_SESSION_TOKEN");
  } else {
    out.access_key_id = profile_value("aws_access_key_id");
    out.secret_access_key = profile_value("aws_secret_access_key");
    out.session_token = profile_value("aws_session_token");
    if (out.access_key_id.empty() != out.secret_access_key.empty()) {
      const std::string where =
          "profile " + out.profile + " (" + cred_path + ", " + config_path + ")";
      return out.access_key_id.empty()
                 ? partial(where, "aws_secret_access_key", "aws_access_key_id")
                 : partial(where, "aws_access_key_id", "aws_secret_access_key");
    }
  }
  for (std::string v : {env("AWS_REGION"), env("AWS_DEFAULT_REGION"), profile_value("region")}) {
    if (!v.empty()) {
      out.region = v;
      break;
    }
  }
  const std::pair<std::string, std::string> endpoints[] = {
      {"AWS_ENDPOINT_URL_S3", env("AWS_ENDPOINT_URL_S3")},
      {"AWS_ENDPOINT_URL", env("AWS_ENDPOINT_URL")},
      {"endpoint_url of profile " + out.profile, profile_value("endpoint_url")}};
  for (const auto& [name, v] : endpoints) {
    if (v.empty()) continue;
    // "Invalid endpoint" as the AWS CLI says it: without a scheme every request would go to a
    // host name made of the whole value.
    if (v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0) {
      return Status::InvalidArgument(name + "=" + v +
                                     ": not an endpoint URL (want http://HOST[:PORT] or "
                                     "https://HOST[:PORT])");
    }
    out.endpoint_url = v;
    break;
  }
  while (!out.endpoint_url.empty() && out.endpoint_url.back() == '/') out.endpoint_url.pop_back();
  std::string style = profile_value("s3.addressing_style");
  out.virtual_host = style == "virtual" || (style != "path" && out.endpoint_url.empty());
  return out;
}

std::string RequestUrl(const RemoteUrl& url, const AwsSettings& aws) {
  if (url.scheme == RemoteUrl::Scheme::kHttp) return "http://" + url.host + url.key;
  if (url.scheme == RemoteUrl::Scheme::kHttps) return "https://" + url.host + url.key;
  std::string key = PercentEncodeKey(url.key);
  std::string endpoint =
      aws.endpoint_url.empty() ? "https://s3." + aws.region + ".amazonaws.com" : aws.endpoint_url;
  if (!aws.virtual_host) return endpoint + "/" + url.bucket + "/" + key;
  size_t host_at = endpoint.find("://");
  host_at = host_at == std::string::npos ? 0 : host_at + 3;
  return endpoint.substr(0, host_at) + url.bucket + "." + endpoint.substr(host_at) + "/" + key;
}

}  // namespace kiln::remote
