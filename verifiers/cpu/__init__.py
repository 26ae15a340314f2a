"""CPU checks that compute: arithmetic over hardware constants, math identities in fp64, tiled references."""
