/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version: the version every ckptfs program prints for --version.
 *
 * Kept in codec/ (not mount/ or fuse/) so that the command-line tools built on the
 * codec alone (ckptfs-dump, ckptfs-stat) say the same version as the mount
 * without depending on the FUSE front-end's headers.
 */
#ifndef CK_VERSION_H
#define CK_VERSION_H

#define CKPTFS_VERSION "0.1.0"

#endif
