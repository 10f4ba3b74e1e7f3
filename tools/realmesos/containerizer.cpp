// mesos-containerizer for the agents of realmesos-cluster: the two subcommands an agent
// runs here, over the classes libmesos exports. Upstream's main
// (src/slave/containerizer/mesos/main.cpp) dispatches to them with Subcommand::dispatch
// (stout/subcommand.hpp); this does the same for:
// - "launch" (MesosContainerizerLaunch): start an executor, or a task, in its container;
// - "network-cni-setup" (NetworkCniIsolatorSetup): the hostname and network files of a
//   container with its own root filesystem (the network/cni isolator, which the agent
//   always loads).
// Each subcommand object is built in place (its vtable, an empty name, its Flags), its flags
// loaded from the command line and MESOS_CONTAINERIZER_*, and execute() run.

#include <cstdio>
#include <cstring>
#include <string>

#include "abi.hpp"

// The classes' vtables, so that the objects built in place are ones (execute() may call
// through them).
extern void* launchVtable[] __asm__("_ZTVN5mesos8internal5slave24MesosContainerizerLaunchE");
extern void* cniSetupVtable[] __asm__("_ZTVN5mesos8internal5slave23NetworkCniIsolatorSetupE");

namespace {
alignas(64) unsigned char room[ROOM];

template <typename Command>
int run(void** vtable, int argc, char** argv)
{
    *reinterpret_cast<void***>(room) = vtable + 2;  // past offset-to-top and typeinfo
    new (room + 8) std::string();  // Subcommand::name_, read by nobody here
    new (room + SUBCOMMAND_FLAGS_OFFSET) typename Command::Flags();
    auto* command = reinterpret_cast<Command*>(room);

    LoadResult load = command->getFlags()->load(
        Option<std::string>("MESOS_CONTAINERIZER_"), argc - 1, argv + 1, false, false);
    if (load.error_state == 0) {
        std::fprintf(stderr, "Failed to parse the flags: %s\n", load.message()->c_str());
        return 1;
    }
    return command->execute();
}
}  // namespace

int main(int argc, char** argv)
{
    using namespace mesos::internal::slave;
    if (argc >= 2 && std::strcmp(argv[1], "launch") == 0) {
        return run<MesosContainerizerLaunch>(launchVtable, argc, argv);
    }
    if (argc >= 2 && std::strcmp(argv[1], "network-cni-setup") == 0) {
        return run<NetworkCniIsolatorSetup>(cniSetupVtable, argc, argv);
    }
    std::fprintf(
        stderr,
        "Usage: %s launch|network-cni-setup [--flags]\n(only these subcommands are built here)\n",
        argv[0]);
    return 1;
}
