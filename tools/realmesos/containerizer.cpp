// mesos-containerizer for the agents of realmesos-cluster: only its "launch" subcommand, the
// one the agent runs (through the posix launcher) to start an executor in its container.
// Upstream's main (src/slave/containerizer/mesos/main.cpp) dispatches to
// MesosContainerizerLaunch; this does the same for the one subcommand, over the class
// exported by libmesos: its Flags are built in place, loaded from the command line and
// MESOS_CONTAINERIZER_*, and execute() runs.

#include <cstdio>
#include <cstring>
#include <string>

#include "abi.hpp"

// The class's vtable, so that the object built in place is one (execute() may call through it).
extern void* launchVtable[] __asm__("_ZTVN5mesos8internal5slave24MesosContainerizerLaunchE");

namespace {
alignas(64) unsigned char launchRoom[ROOM];
}

int main(int argc, char** argv)
{
    if (argc < 2 || std::strcmp(argv[1], "launch") != 0) {
        std::fprintf(stderr, "Usage: %s launch [--flags]\n(only the launch subcommand is built here)\n", argv[0]);
        return 1;
    }
    *reinterpret_cast<void***>(launchRoom) = launchVtable + 2;  // past offset-to-top and typeinfo
    new (launchRoom + 8) std::string();  // Subcommand::name_, read by nobody here
    new (launchRoom + LAUNCH_FLAGS_OFFSET) mesos::internal::slave::MesosContainerizerLaunch::Flags();
    auto* launch = reinterpret_cast<mesos::internal::slave::MesosContainerizerLaunch*>(launchRoom);

    LoadResult load = launch->getFlags()->load(
        Option<std::string>("MESOS_CONTAINERIZER_"), argc - 1, argv + 1, false, false);
    if (load.error_state == 0) {
        std::fprintf(stderr, "Failed to parse the flags: %s\n", load.message()->c_str());
        return 1;
    }
    return launch->execute();
}
