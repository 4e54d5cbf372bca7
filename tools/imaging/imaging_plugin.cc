#include "tools/imaging/imaging_plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

// The path from the installed executable's directory (BINDIR) to the plugin's (LIBDIR/kiln), set
// by tools/CMakeLists.txt from GNUInstallDirs, e.g. "../lib/kiln".
#ifndef KILN_IMAGING_PLUGIN_RELDIR
#define KILN_IMAGING_PLUGIN_RELDIR "../lib/kiln"
#endif

namespace kiln {
namespace {

// Returns the directory of the running executable, "" if /proc/self/exe cannot be read.
std::string ExecutableDir() {
  std::string path(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
  if (n <= 0 || static_cast<size_t>(n) >= path.size()) return "";
  path.resize(static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

Result<const ImagingPlugin*> Open() {
  const std::string dir = ExecutableDir();
  if (dir.empty())
    return Status::Internal("cannot read /proc/self/exe to find " +
                            std::string(kImagingPluginFile));
  // The build tree's place first: an installed kiln has nothing beside it in BINDIR.
  const std::vector<std::string> candidates = {
      dir + "/" + kImagingPluginFile,
      dir + "/" + KILN_IMAGING_PLUGIN_RELDIR + "/" + kImagingPluginFile};
  for (const std::string& path : candidates) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    // RTLD_LOCAL: the plugin's copies of kiln's code stay its own.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return Status::Internal("cannot load the image plugin " + path + ": " + ::dlerror());
    }
    using Entry = const ImagingPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, kImagingPluginSymbol));
    if (entry == nullptr) {
      return Status::Internal(path + " is not kiln's image plugin: it has no symbol " +
                              kImagingPluginSymbol);
    }
    const ImagingPlugin* plugin = entry();
    const std::string key = ImagingPluginAbiKey();
    if (plugin == nullptr || std::strcmp(plugin->abi_key, key.c_str()) != 0) {
      return Status::Internal(path + " is from another build of kiln (" +
                              (plugin ? plugin->abi_key : "no key") + ", this kiln is " + key +
                              "): install the plugin of this build");
    }
    return plugin;
  }
  return Status::NotFound(std::string("the image plugin ") + kImagingPluginFile +
                          " that kiln pack and kiln show need is not installed: looked for " +
                          candidates[0] + " and " + candidates[1]);
}

}  // namespace

Result<const ImagingPlugin*> LoadImagingPlugin() {
  static std::once_flag once;
  static Result<const ImagingPlugin*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<const ImagingPlugin*>(Open()); });
  return *loaded;
}

}  // namespace kiln
