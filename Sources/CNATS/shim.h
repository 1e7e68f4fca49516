#ifndef SHARELEDGER_CNATS_SHIM_H
#define SHARELEDGER_CNATS_SHIM_H
#include <nats/nats.h>
#endif
