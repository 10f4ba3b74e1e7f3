// realmesos-cluster: an Apache Mesos 1.11.0 master and MESOS_NUM_SLAVES agents in this
// process, from libmesos (the mesos.scheduler tarball's shared object).
//
// As mesos-master does, libprocess is initialised first with the "master" delegate (so
// /api/v1 and /api/v1/scheduler reach the master) and its HTTP authentication realms. Then a
// scheduler driver is built for the master "local": its constructor reads the MESOS_*
// environment (local::Flags, then master::Flags and slave::Flags inside local::launch) and
// starts the master and the agents. The driver is never started, so no framework of its
// own registers or holds offers. The program then waits for SIGTERM or SIGINT, shuts the
// cluster down and exits.
//
// Address: LIBPROCESS_IP and LIBPROCESS_PORT. Everything else: MESOS_* (see tools/realmesos).
// REALMESOS_ZK=zk://host:port/path: the master contends and master and agents detect the
// leader in ZooKeeper (zookeeper.cpp), so several clusters elect one leading master.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

#include "abi.hpp"

namespace {

// Stands in for mesos::Scheduler. The driver calls its scheduler only once started, or on
// error() when its flags do not load: every slot of this vtable reports that and exits.
[[noreturn]] void schedulerCalled()
{
    std::fputs("realmesos: the local driver called its scheduler (bad MESOS_* flags?)\n", stderr);
    std::_Exit(2);
}

class NoScheduler
{
public:
    virtual ~NoScheduler() { schedulerCalled(); }
#define SLOT(n) \
    virtual void slot##n() { schedulerCalled(); }
    SLOT(0) SLOT(1) SLOT(2) SLOT(3) SLOT(4) SLOT(5) SLOT(6) SLOT(7) SLOT(8) SLOT(9) SLOT(10) SLOT(11)
#undef SLOT
};

int stopPipe[2];

void onStop(int signal)
{
    unsigned char byte = static_cast<unsigned char>(signal);
    (void)!write(stopPipe[1], &byte, 1);
}

alignas(64) unsigned char frameworkRoom[ROOM];
alignas(64) unsigned char driverRoom[ROOM];

}  // namespace

void useZooKeeper();  // zookeeper.cpp

int main()
{
    // A handler, not a blocked mask: the agents' executors and tasks inherit the mask of the
    // thread that forks them (exec keeps it), and a task must see SIGTERM when it is killed.
    if (pipe(stopPipe) != 0) {
        std::perror("realmesos: pipe");
        return 1;
    }
    std::signal(SIGTERM, onStop);
    std::signal(SIGINT, onStop);

    process::initialize(
        Option<std::string>("master"),
        Option<std::string>("mesos-master-readwrite"),
        Option<std::string>("mesos-master-readonly"));
    useZooKeeper();  // ZooKeeper sessions need libprocess

    static NoScheduler scheduler;
    auto* framework = new (frameworkRoom) mesos::FrameworkInfo();
    new (driverRoom) mesos::MesosSchedulerDriver(
        reinterpret_cast<mesos::Scheduler*>(&scheduler), *framework, "local");

    std::fprintf(stderr, "realmesos: cluster started\n");
    std::fflush(stderr);

    unsigned char signal = 0;
    while (read(stopPipe[0], &signal, 1) != 1) {
    }
    std::fprintf(stderr, "realmesos: %s, shutting down\n", strsignal(signal));
    mesos::internal::local::shutdown();
    std::_Exit(0);
}
