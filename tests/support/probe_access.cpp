// probe_access: run as an unprivileged user, tries every way we know to reach another
// process's tenant segment: its open fds (/proc/PID/fd), its mapped files
// (/proc/PID/map_files), its memory (/proc/PID/mem), and named shared memory (/dev/shm).
// Prints how many it could open and exits 0 only if none.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

int try_open_dir_entries(const std::string& dir, const char* what, const char* must_contain = "") {
  int opened = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::strstr(e->d_name, must_contain) == nullptr) continue;
    const std::string path = dir + "/" + e->d_name;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      std::printf("opened %s %s\n", what, path.c_str());
      ++opened;
      ::close(fd);
    }
  }
  ::closedir(d);
  return opened;
}

}  // namespace

int main(int argc, char** argv) {
  int opened = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string proc = std::string("/proc/") + argv[i];
    opened += try_open_dir_entries(proc + "/fd", "fd");
    opened += try_open_dir_entries(proc + "/map_files", "map_file");
    const int mem = ::open((proc + "/mem").c_str(), O_RDONLY);
    if (mem >= 0) {
      std::printf("opened mem %s/mem\n", proc.c_str());
      ++opened;
      ::close(mem);
    }
  }
  opened += try_open_dir_entries("/dev/shm", "shm", "nexus");  // other programs' files are not ours
  std::printf("opened=%d\n", opened);
  return opened == 0 ? 0 : 1;
}
