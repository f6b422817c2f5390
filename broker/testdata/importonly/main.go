// Command importonly imports package broker and does nothing else: run
// with GODEBUG=inittrace=1 it shows what importing the package costs at
// program start (TestImportCostsLittleAtStart).
package main

import _ "github.com/delayq/delayq/broker"

func main() {}
