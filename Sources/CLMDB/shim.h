#ifndef SHARELEDGER_CLMDB_SHIM_H
#define SHARELEDGER_CLMDB_SHIM_H
#include <lmdb.h>
#endif
