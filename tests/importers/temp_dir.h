// A temporary directory for importer tests, removed with its files.
#ifndef PITSTOP_TESTS_IMPORTERS_TEMP_DIR_H_
#define PITSTOP_TESTS_IMPORTERS_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace pitstop::importers {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pitstop-imp-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string Write(const std::string& name, const std::string& bytes) {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pitstop::importers

#endif  // PITSTOP_TESTS_IMPORTERS_TEMP_DIR_H_
